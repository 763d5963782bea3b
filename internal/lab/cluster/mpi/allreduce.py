#!/usr/bin/env python3
"""An MPI job for package cluster's tests, run with mpirun over mpi4py.

Every rank takes part in allreduce checks (the sum, maximum and minimum of
the ranks; the element-wise sum of a vector of doubles and one of 64-bit
integers, each element checked), then rank 0 plays ping-pong with each
other rank in turn: latency for small messages, bandwidth for 1 KiB to the
largest size asked for, sizes growing by 4. Rank 0 prints one JSON object
on a line of its own; the Go side (cluster.MPIResult) parses it and checks
the sums itself.
"""
import argparse
import array
import json
import sys

from mpi4py import MPI


def pingpong(comm, peer, nbytes, reps):
    """Mean round-trip time of reps exchanges of nbytes with peer, after
    one exchange to warm up; rank 0 measures, peer echoes."""
    buf = bytearray(nbytes)
    msg = [buf, MPI.BYTE]
    if comm.Get_rank() == 0:
        comm.Send(msg, dest=peer, tag=7)
        comm.Recv(msg, source=peer, tag=7)
        t0 = MPI.Wtime()
        for _ in range(reps):
            comm.Send(msg, dest=peer, tag=7)
            comm.Recv(msg, source=peer, tag=7)
        return (MPI.Wtime() - t0) / reps
    for _ in range(reps + 1):
        comm.Recv(msg, source=0, tag=7)
        comm.Send(msg, dest=0, tag=7)
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vector", type=int, default=1 << 16, help="elements of the reduced vectors")
    p.add_argument("--lat-bytes", type=int, default=8)
    p.add_argument("--lat-reps", type=int, default=20)
    p.add_argument("--bw-reps", type=int, default=4)
    p.add_argument("--max-bytes", type=int, default=4 << 20)
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = comm.gather(MPI.Get_processor_name(), root=0)

    # allreduce: scalars
    sum_ranks = comm.allreduce(rank, op=MPI.SUM)
    max_rank = comm.allreduce(rank, op=MPI.MAX)
    min_rank = comm.allreduce(rank, op=MPI.MIN)

    # allreduce: vectors, element i of rank r is r + i
    n = args.vector
    dsend = array.array("d", (float(rank + i) for i in range(n)))
    drecv = array.array("d", bytes(8 * n))
    comm.Allreduce([dsend, MPI.DOUBLE], [drecv, MPI.DOUBLE], op=MPI.SUM)
    qsend = array.array("q", (rank * n + i for i in range(n)))
    qrecv = array.array("q", bytes(8 * n))
    comm.Allreduce([qsend, MPI.INT64_T], [qrecv, MPI.INT64_T], op=MPI.SUM)
    base = size * (size - 1) // 2
    bad = sum(1 for i in range(n) if drecv[i] != float(size * i + base))
    bad += sum(1 for i in range(n) if qrecv[i] != size * i + n * base)
    bad = comm.allreduce(bad, op=MPI.SUM)

    # ping-pong: rank 0 with each other rank in turn
    table = []
    for peer in range(1, size):
        entry = None
        if rank in (0, peer):
            rtt = pingpong(comm, peer, args.lat_bytes, args.lat_reps)
            points = []
            nbytes = 1024
            while nbytes <= args.max_bytes:
                t = pingpong(comm, peer, nbytes, args.bw_reps)
                if rank == 0:
                    points.append({"bytes": nbytes, "us": t / 2 * 1e6, "mib_per_s": nbytes / (t / 2) / (1 << 20)})
                nbytes *= 4
            if rank == 0:
                entry = {"peer": peer, "host": hosts[peer], "latency_us": rtt / 2 * 1e6, "bandwidth": points}
        if entry:
            table.append(entry)
        comm.Barrier()

    if rank == 0:
        out = {
            "size": size,
            "hosts": hosts,
            "allreduce": {
                "sum_ranks": sum_ranks,
                "max_rank": max_rank,
                "min_rank": min_rank,
                "vector_len": n,
                "double_sum": sum(drecv),
                "int64_sum": sum(qrecv),
                "bad_elements": bad,
            },
            "pingpong": table,
        }
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
