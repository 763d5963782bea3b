/*
 * An MPI job for package cluster's tests in C, for MPI implementations
 * mpi4py is not built for (Debian's MPICH): the same checks and the same
 * JSON line as allreduce.py. Every rank takes part in allreduce checks
 * (the sum, maximum and minimum of the ranks; the element-wise sum of a
 * vector of doubles and one of 64-bit integers, each element checked),
 * then rank 0 plays ping-pong with each other rank in turn: latency for
 * small messages, bandwidth for 1 KiB to the largest size asked for,
 * sizes growing by 4. Rank 0 prints one JSON object on a line of its own.
 *
 *   allreduce [--vector N] [--max-bytes N]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAT_BYTES = 8, LAT_REPS = 20, BW_REPS = 4 };

/* pingpong is the mean round trip of reps exchanges of n bytes with peer,
 * after one to warm up; rank 0 measures, peer echoes. */
static double pingpong(int rank, int peer, char *buf, int n, int reps)
{
	if (rank == 0) {
		MPI_Send(buf, n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
		MPI_Recv(buf, n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		double t0 = MPI_Wtime();
		for (int i = 0; i < reps; i++) {
			MPI_Send(buf, n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
			MPI_Recv(buf, n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		}
		return (MPI_Wtime() - t0) / reps;
	}
	for (int i = 0; i < reps + 1; i++) {
		MPI_Recv(buf, n, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Send(buf, n, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n = 1 << 16, maxBytes = 4 << 20;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--vector") == 0)
			n = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--max-bytes") == 0)
			maxBytes = atol(argv[i + 1]);
	}
	MPI_Init(&argc, &argv);
	int rank, size, len;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	char name[MPI_MAX_PROCESSOR_NAME];
	memset(name, 0, sizeof name);
	MPI_Get_processor_name(name, &len);
	char *names = malloc((size_t)size * MPI_MAX_PROCESSOR_NAME);
	MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);

	/* allreduce: scalars */
	int sum, max, min;
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&rank, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Allreduce(&rank, &min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

	/* allreduce: vectors, element i of rank r is r + i (doubles) and
	 * r*n + i (int64) */
	double *ds = malloc(n * sizeof(double)), *dr = malloc(n * sizeof(double));
	int64_t *qs = malloc(n * sizeof(int64_t)), *qr = malloc(n * sizeof(int64_t));
	for (long i = 0; i < n; i++) {
		ds[i] = (double)(rank + i);
		qs[i] = (int64_t)rank * n + i;
	}
	MPI_Allreduce(ds, dr, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(qs, qr, (int)n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	long base = (long)size * (size - 1) / 2;
	int bad = 0, allBad;
	double dsum = 0;
	int64_t qsum = 0;
	for (long i = 0; i < n; i++) {
		bad += dr[i] != (double)(size * i + base);
		bad += qr[i] != (int64_t)size * i + n * base;
		dsum += dr[i];
		qsum += qr[i];
	}
	MPI_Allreduce(&bad, &allBad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

	/* ping-pong: rank 0 with each other rank in turn; rank 0 writes
	 * the table as it goes */
	char *buf = calloc(1, maxBytes > LAT_BYTES ? maxBytes : LAT_BYTES);
	char *table = calloc(1, 64 + (size_t)size * (256 + 64 * 16));
	size_t at = 0;
	for (int peer = 1; peer < size; peer++) {
		if (rank == 0 || rank == peer) {
			double rtt = pingpong(rank, peer, buf, LAT_BYTES, LAT_REPS);
			if (rank == 0)
				at += sprintf(table + at, "%s{\"peer\":%d,\"host\":\"%s\",\"latency_us\":%.3f,\"bandwidth\":[",
					      peer > 1 ? "," : "", peer, names + (size_t)peer * MPI_MAX_PROCESSOR_NAME, rtt / 2 * 1e6);
			for (long b = 1024; b <= maxBytes; b *= 4) {
				double t = pingpong(rank, peer, buf, (int)b, BW_REPS);
				if (rank == 0)
					at += sprintf(table + at, "%s{\"bytes\":%ld,\"us\":%.3f,\"mib_per_s\":%.3f}",
						      b > 1024 ? "," : "", b, t / 2 * 1e6, b / (t / 2) / (1 << 20));
			}
			if (rank == 0)
				at += sprintf(table + at, "]}");
		}
		MPI_Barrier(MPI_COMM_WORLD);
	}

	if (rank == 0) {
		printf("{\"size\":%d,\"hosts\":[", size);
		for (int r = 0; r < size; r++)
			printf("%s\"%s\"", r ? "," : "", names + (size_t)r * MPI_MAX_PROCESSOR_NAME);
		printf("],\"allreduce\":{\"sum_ranks\":%d,\"max_rank\":%d,\"min_rank\":%d,\"vector_len\":%ld,"
		       "\"double_sum\":%.1f,\"int64_sum\":%lld,\"bad_elements\":%d},\"pingpong\":[%s]}\n",
		       sum, max, min, n, dsum, (long long)qsum, allBad, table);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
