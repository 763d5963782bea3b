package cluster

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

//go:embed mpi/allreduce.py
var allreducePy []byte

//go:embed mpi/allreduce.c
var allreduceC []byte

// MPI implementations a job may run on.
const (
	// OpenMPI is Debian's Open MPI (openmpi-bin): mpirun.openmpi, the
	// job in Python (mpi4py, built for it).
	OpenMPI = "openmpi"
	// MPICH is Debian's MPICH (mpich, libmpich-dev): mpiexec.hydra, the
	// job in C (mpi/allreduce.c, built with mpicc.mpich for the run).
	MPICH = "mpich"
)

// MPIJob is an mpirun of the allreduce program.
type MPIJob struct {
	// MPI is the implementation: OpenMPI (the default) or MPICH.
	MPI      string
	Launcher string   // the host mpirun runs on
	Hosts    []string // one rank on each, in rank order
	// User runs the launcher as this local account (setpriv, with a
	// login environment of its own) instead of root; the job's files go
	// to a directory in its home. The ranks elsewhere run as whatever
	// the cluster's agent runs them as (with gridlink exec: the account
	// the target's grid-mapfile maps the launching user to).
	User string
	// Iface is the network interface MPICH's ranks talk over (UCX,
	// which Debian's MPICH runs on, picks devices, not prefixes); empty:
	// as MPICH picks. Open MPI is pinned by Config.Net.
	Iface string
	// MaxBytes is the largest ping-pong message, 4 MiB by default;
	// Vector the length of the reduced vectors, 65536 by default.
	MaxBytes, Vector int
	// Timeout bounds the job, DefaultJobTimeout if zero: then its
	// launcher's process group is killed and MPIRun returns a
	// *TimeoutError with its output and the job's processes.
	Timeout time.Duration
	// ResultGrace, if not zero, ends a job that printed its result and
	// has not exited ResultGrace later the same way, with a
	// *TimeoutError (MPICH's finalize race, docs/mpi.md).
	ResultGrace time.Duration
	// Python runs the program on every host: Debian's /usr/bin/python3 by
	// default, the one python3-mpi4py is installed for (a python3 earlier
	// in PATH, such as pyenv's, would not find mpi4py).
	Python string
}

// MPIRunArgs is the mpirun command line of job (Open MPI): one rank per
// host in the hostfile's order, launched over ssh by host name with the
// cluster's configuration (no tree spawn: only the launcher needs to
// reach every host), as root, MPI's TCP traffic and the daemons' out of
// band channel pinned to the cluster's prefix, the ob1 point-to-point
// layer over TCP only (never UCX or shared memory, which would bypass the
// network), and ranks that yield the CPU while they wait: every lab host
// shares this machine's cores, and ranks spinning in MPI's progress loop
// starve what carries their messages (the link emulator, gridlink's node
// agents; on grid6's virtual network the one-way latency of an 8-byte
// message was 10.6 ms spinning, 0.74 ms yielding, TestClusterVIP).
func (c *Cluster) MPIRunArgs(hostfile, program string, job MPIJob) []string {
	cidr := c.cfg.Net.String()
	python := job.Python
	if python == "" {
		python = "/usr/bin/python3"
	}
	agent := []string{"--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args", "-F " + c.SSHConfig()}
	if len(c.cfg.Agent) > 0 {
		agent = []string{"--mca", "plm_rsh_agent", strings.Join(c.cfg.Agent, " ")}
	}
	argv := append([]string{"mpirun.openmpi", "--allow-run-as-root",
		"--hostfile", hostfile, "--np", fmt.Sprint(len(job.Hosts)), "--map-by", "node"}, agent...)
	argv = append(argv,
		"--mca", "plm_rsh_no_tree_spawn", "1",
		"--mca", "orte_keep_fqdn_hostnames", "1",
		"--mca", "pml", "ob1",
		"--mca", "btl", "self,tcp",
		"--mca", "mpi_yield_when_idle", "1",
		"--mca", "btl_tcp_if_include", cidr,
		"--mca", "oob_tcp_if_include", cidr,
		python, program)
	if job.MaxBytes > 0 {
		argv = append(argv, "--max-bytes", fmt.Sprint(job.MaxBytes))
	}
	if job.Vector > 0 {
		argv = append(argv, "--vector", fmt.Sprint(job.Vector))
	}
	return argv
}

// hostfileText is an Open MPI hostfile: one slot on each host.
func hostfileText(hosts []string) []byte {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "%s slots=1\n", h)
	}
	return []byte(b.String())
}

// MPIResult is what the allreduce program's rank 0 prints.
type MPIResult struct {
	Size      int        `json:"size"`
	Hosts     []string   `json:"hosts"` // rank i's processor name (its host name)
	Allreduce Allreduce  `json:"allreduce"`
	PingPong  []PingPong `json:"pingpong"`
}

// Allreduce holds the allreduce results as the ranks got them.
type Allreduce struct {
	SumRanks    int     `json:"sum_ranks"`
	MaxRank     int     `json:"max_rank"`
	MinRank     int     `json:"min_rank"`
	VectorLen   int     `json:"vector_len"`
	DoubleSum   float64 `json:"double_sum"`   // sum of the reduced doubles, element i of rank r being r+i
	Int64Sum    int64   `json:"int64_sum"`    // sum of the reduced int64s, element i of rank r being r*len+i
	BadElements int     `json:"bad_elements"` // elements the ranks found wrong, all ranks together
}

// PingPong is rank 0's exchange with one peer.
type PingPong struct {
	Peer      int     `json:"peer"`
	Host      string  `json:"host"`
	LatencyUS float64 `json:"latency_us"` // half the mean round trip of a small message
	Bandwidth []Point `json:"bandwidth"`
}

// Point is one message size of a ping-pong.
type Point struct {
	Bytes   int     `json:"bytes"`
	US      float64 `json:"us"` // half the mean round trip
	MiBPerS float64 `json:"mib_per_s"`
}

// ParseMPIResult finds the program's JSON line in mpirun's output.
func ParseMPIResult(out []byte) (*MPIResult, error) {
	for _, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r MPIResult
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("cluster: the MPI job's result: %w", err)
		}
		return &r, nil
	}
	return nil, fmt.Errorf("cluster: the MPI job printed no result:\n%s", lastLines(string(out), 20))
}

// Check verifies the allreduce results against what n ranks must get,
// and that rank i ran on hosts[i]: nil, or every discrepancy.
func (r *MPIResult) Check(hosts []string) error {
	var bad []string
	n := len(hosts)
	if r.Size != n {
		bad = append(bad, fmt.Sprintf("%d ranks, want %d", r.Size, n))
	}
	if strings.Join(r.Hosts, " ") != strings.Join(hosts, " ") {
		bad = append(bad, fmt.Sprintf("ranks ran on %v, want %v", r.Hosts, hosts))
	}
	a, base := r.Allreduce, n*(n-1)/2
	if a.SumRanks != base || a.MaxRank != n-1 || a.MinRank != 0 {
		bad = append(bad, fmt.Sprintf("sum, max, min of ranks %d, %d, %d; want %d, %d, 0", a.SumRanks, a.MaxRank, a.MinRank, base, n-1))
	}
	L := a.VectorLen
	if want := float64(n*L*(L-1)/2 + L*base); a.DoubleSum != want {
		bad = append(bad, fmt.Sprintf("sum of the reduced doubles %v, want %v", a.DoubleSum, want))
	}
	if want := int64(L)*int64(L)*int64(base) + int64(n)*int64(L)*int64(L-1)/2; a.Int64Sum != want {
		bad = append(bad, fmt.Sprintf("sum of the reduced int64s %d, want %d", a.Int64Sum, want))
	}
	if a.BadElements != 0 || L == 0 {
		bad = append(bad, fmt.Sprintf("%d wrong elements of %d", a.BadElements, 2*L))
	}
	if len(r.PingPong) != n-1 {
		bad = append(bad, fmt.Sprintf("ping-pong with %d peers, want %d", len(r.PingPong), n-1))
	}
	if len(bad) > 0 {
		return &CheckError{Problems: bad}
	}
	return nil
}

// CheckError lists what an MPI job got wrong.
type CheckError struct{ Problems []string }

func (e *CheckError) Error() string { return "cluster: MPI job: " + strings.Join(e.Problems, "; ") }

// Table is the ping-pong table: one row per peer, latency then
// bandwidth (MiB/s) by message size.
func (r *MPIResult) Table() string {
	var b strings.Builder
	if len(r.PingPong) == 0 {
		return ""
	}
	fmt.Fprintf(&b, "%-22s %12s", "rank 0 ("+r.Hosts[0]+") to", "latency µs")
	for _, p := range r.PingPong[0].Bandwidth {
		fmt.Fprintf(&b, " %9s", sizeText(p.Bytes))
	}
	b.WriteString("   (MiB/s)\n")
	for _, pp := range r.PingPong {
		fmt.Fprintf(&b, "%-22s %12.0f", pp.Host, pp.LatencyUS)
		for _, p := range pp.Bandwidth {
			fmt.Fprintf(&b, " %9.2f", p.MiBPerS)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
