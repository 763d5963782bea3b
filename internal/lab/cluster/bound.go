package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Every step the cluster runs that waits on other processes (an MPI job,
// a Slurm command, a daemon's start) is bounded: a step that hangs fails
// within its bound, its process group killed, saying what it printed and
// which processes of the job were still there, instead of holding the lab
// (one lab at a time for every lab test on the machine) until go test's
// own timeout kills the whole package with no word on why.

// Bounds of the cluster's steps.
const (
	// DefaultJobTimeout bounds an MPI job (MPIJob.Timeout's default):
	// the jobs here take 3-15 s on grid6, 40 on a loaded machine.
	DefaultJobTimeout = 90 * time.Second
	// SlurmCommandTimeout bounds one Slurm command (sinfo, sbatch,
	// squeue, srun: Slurm.Run's default).
	SlurmCommandTimeout = 60 * time.Second
)

// TimeoutError is a step that did not end within its bound: its process
// group was killed. Output is the end of what it printed; Processes the
// processes of the job that were left when the bound struck (the
// launcher's process group and every process of the job's user, the
// gridlink clients, MPI's daemons and proxies, Slurm's and munge's
// daemons), as ps showed them before the kill.
type TimeoutError struct {
	Host      string // where it ran
	Argv      []string
	After     time.Duration
	Output    string
	Processes string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("on %s: %s: no end after %v: killed its process group\n--- its output (last lines) ---\n%s\n--- processes of the job when it was killed ---\n%s",
		e.Host, strings.Join(e.Argv, " "), e.After, e.Output, e.Processes)
}

// Timeout says the error is a timeout (errors.Is(err, context.DeadlineExceeded)).
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// runBounded runs the command mk makes with a context that ends after
// timeout (or with ctx), in a process group of its own, and returns its
// standard output and error. When the context ends first, it lists the
// processes the job left (jobProcesses; user names the job's account, ""
// for root's), kills the group and returns a *TimeoutError for host and
// argv. A non-nil after ends the command the same way once its standard
// output has held what after.done looks for for after.grace.
func runBounded(ctx context.Context, timeout time.Duration, host string, argv []string, user string, mk func(context.Context) (*exec.Cmd, error), after *afterOutput) ([]byte, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := mk(ctx)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	var ps string
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		snap, left := jobProcesses(cmd.Process.Pid, user)
		mu.Lock()
		ps = snap
		mu.Unlock()
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		// the job's own processes of its account that left the group (MPI's
		// daemons, proxies and ranks in groups of their own), never the
		// account's others (its gridlink agent, which later steps use)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return err
	}
	cmd.WaitDelay = 5 * time.Second
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if after != nil {
		go after.watch(ctx, cancel, &out)
	}
	err = cmd.Run()
	if err != nil && ctx.Err() != nil {
		mu.Lock()
		defer mu.Unlock()
		return out.Bytes(), errb.Bytes(), &TimeoutError{Host: host, Argv: argv, After: time.Since(start).Round(time.Second),
			Output: lastLines(errb.String()+out.String(), 40), Processes: ps}
	}
	return out.Bytes(), errb.Bytes(), err
}

// afterOutput ends a command grace after its standard output first
// satisfies done (a job that printed its result and then hung).
type afterOutput struct {
	grace time.Duration
	done  func(stdout []byte) bool
}

func (a *afterOutput) watch(ctx context.Context, cancel context.CancelFunc, out *lockedBuffer) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var seen time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		switch {
		case seen.IsZero() && a.done(out.Bytes()):
			seen = time.Now()
		case !seen.IsZero() && time.Since(seen) >= a.grace:
			cancel()
			return
		}
	}
}

// lockedBuffer is a bytes.Buffer that one goroutine writes while
// another reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Bytes is a copy of what was written so far.
func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

func (l *lockedBuffer) String() string { return string(l.Bytes()) }

// jobProcesses is ps's list of the processes a job may have left: pgid's
// group, user's processes (if user is not "" or root), and every process
// of gridlink, MPI, Slurm or munge on the machine (the lab's hosts share
// this machine's process table), with their state and what they wait in;
// and the IDs of user's processes outside the group that are a job's
// (jobLeftover: MPI's, Slurm's commands), to be killed with it.
func jobProcesses(pgid int, user string) (string, []int) {
	out, err := exec.Command("ps", "-e", "-o", "pid,ppid,pgid,user:16,etime,stat,wchan:22,args", "--forest").Output()
	if err != nil {
		return "ps: " + err.Error(), nil
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	keep := []string{lines[0]}
	var left []int
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		mine := user != "" && user != "root" && f[3] == user
		if f[2] == strconv.Itoa(pgid) || mine || jobProgram.MatchString(strings.Join(f[7:], " ")) {
			keep = append(keep, l)
		}
		if pid, err := strconv.Atoi(f[0]); err == nil && mine && f[2] != strconv.Itoa(pgid) && jobLeftover.MatchString(strings.Join(f[7:], " ")) {
			left = append(left, pid)
		}
	}
	if len(keep) > 200 {
		keep = append(keep[:200], fmt.Sprintf("... %d more", len(keep)-200))
	}
	return strings.Join(keep, "\n"), left
}

// jobLeftover matches the command lines of a job's processes that may
// outlive its launcher's group: MPI's daemons, proxies and ranks, Slurm's
// commands. Not gridlink: the account's own agent serves later steps.
var jobLeftover = regexp.MustCompile(`(^|[\s/"])(hydra_pmi_proxy|mpiexec(\.hydra)?|mpirun(\.openmpi)?|orted|allreduce[-a-z.]*|srun|sbatch)("|\s|$)`)

// jobProgram matches the command lines jobProcesses lists.
var jobProgram = regexp.MustCompile(`gridlink|hydra|mpiexec|mpirun|orted|allreduce|slurm|srun|sbatch|munge`)
