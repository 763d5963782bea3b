//go:build linux

package cluster

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A step that hangs fails at its bound, not at go test's: its process
// group is killed, children included, and the error carries what it
// printed and which processes were there (the MPICH job that hung 344 s
// in CI until the test's whole context ran out).
func TestRunBoundedKillsAHungStep(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	argv := []string{"sh", "-c", `sleep 300 & echo $! >"$1"; echo started; echo on stderr >&2; wait`, "sh", pidFile}
	out, errb, err := runBounded(context.Background(), 2*time.Second, "here", argv, "", func(ctx context.Context) (*exec.Cmd, error) {
		return exec.CommandContext(ctx, argv[0], argv[1:]...), nil
	}, nil)
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hung step: %v (out %q, err %q); want a *TimeoutError", err, out, errb)
	}
	if !strings.Contains(te.Output, "started") || !strings.Contains(te.Output, "on stderr") {
		t.Errorf("the timeout's output %q lacks what the step printed", te.Output)
	}
	if !strings.Contains(te.Processes, "sleep 300") || !strings.Contains(te.Processes, "PID") {
		t.Errorf("the processes at the timeout do not show the hung child:\n%s", te.Processes)
	}
	if !strings.Contains(err.Error(), "no end after") {
		t.Errorf("the error does not say it timed out: %v", err)
	}
	b, _ := exec.Command("cat", pidFile).Output()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if perr != nil {
		t.Fatalf("the child's pid: %q", b)
	}
	// the child of the killed group is gone (reaped by init once killed)
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the hung step's child %d is still running", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A step that ends in time is not a timeout, whatever its status.
func TestRunBoundedEndsInTime(t *testing.T) {
	out, _, err := runBounded(context.Background(), time.Minute, "here", nil, "", func(ctx context.Context) (*exec.Cmd, error) {
		return exec.CommandContext(ctx, "sh", "-c", "echo done; exit 3"), nil
	}, nil)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || string(out) != "done\n" {
		t.Errorf("a step that exits 3: %q, %v", out, err)
	}
}

// A step that printed what it was run for and then hangs (MPICH's
// finalize race) ends a grace after the output, long before its bound;
// one that keeps printing other things runs on.
func TestRunBoundedEndsAfterItsResult(t *testing.T) {
	after := &afterOutput{grace: time.Second, done: func(out []byte) bool { return strings.Contains(string(out), "RESULT") }}
	start := time.Now()
	out, _, err := runBounded(context.Background(), time.Minute, "here", nil, "", func(ctx context.Context) (*exec.Cmd, error) {
		return exec.CommandContext(ctx, "sh", "-c", "echo RESULT; sleep 300"), nil
	}, after)
	var te *TimeoutError
	if !errors.As(err, &te) || string(out) != "RESULT\n" {
		t.Fatalf("a step that hangs after its result: %q, %v; want a *TimeoutError", out, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the step ended %v after it started; want about a second after its result", d)
	}
	out, _, err = runBounded(context.Background(), time.Minute, "here", nil, "", func(ctx context.Context) (*exec.Cmd, error) {
		return exec.CommandContext(ctx, "sh", "-c", "echo working; sleep 3; echo RESULT"), nil
	}, after)
	if err != nil || string(out) != "working\nRESULT\n" {
		t.Errorf("a step that ends on its own: %q, %v", out, err)
	}
}

// The wait for munged's socket says why it ended: the caller's time
// (CI's "no munge.socket after 10s" came 0.00 s into a subtest whose
// context an earlier subtest had used up), or the daemon's exit, not a
// timeout it did not wait out.
func TestWaitFileSaysWhy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "socket")

	sleeper, err := startWatched("sleeper", exec.Command("sleep", "30"))
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.stop(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = waitFile(ctx, path, time.Minute, sleeper)
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "after") {
		t.Errorf("a wait with its caller's time gone: %v", err)
	}

	quitter, err := startWatched("quitter", exec.Command("sh", "-c", "exit 4"))
	if err != nil {
		t.Fatal(err)
	}
	err = waitFile(context.Background(), path, time.Minute, quitter)
	var xe *ExitedError
	var ee *exec.ExitError
	if !errors.As(err, &xe) || xe.Daemon != "quitter" || !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Errorf("a daemon that exits: %v", err)
	}

	maker, err := startWatched("maker", exec.Command("sh", "-c", `sleep 0.2; : >"$1"; sleep 30`, "sh", path))
	if err != nil {
		t.Fatal(err)
	}
	defer maker.stop(time.Second)
	if err := waitFile(context.Background(), path, time.Minute, maker); err != nil {
		t.Errorf("a daemon that makes the file: %v", err)
	}
}

// zombie says pid has exited and waits for its parent's wait.
func zombie(pid int) bool {
	b, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	return err != nil || strings.HasPrefix(strings.TrimSpace(string(b)), "Z")
}

// What a timeout kills beyond the launcher's group: the job's MPI and
// Slurm processes of its account, never the account's gridlink agent
// (the CI run of 00:54: the MPICH job's timeout killed alice's agent,
// and the Slurm subtests after it failed, "agent of uid 0 refuses uid
// 1001").
func TestJobLeftover(t *testing.T) {
	for line, want := range map[string]bool{
		`\_ sh -c "/usr/bin/hydra_pmi_proxy" --control-port 100.110.217.97:38119 --rmk user`:                true,
		`|       \_ /usr/bin/hydra_pmi_proxy --control-port 100.110.217.97:38119 --rmk user --launcher ssh`: true,
		`|           \_ /tmp/T/001/cluster-mpi-333804695/allreduce-mpich --max-bytes 262144 --vector 4096`:  true,
		`\_ mpiexec.hydra -launcher ssh -launcher-exec /tmp/T/002/gridlink-exec -hosts das3v-n1.grid`:       true,
		`\_ orted --daemonize -mca ess "env"`: true,
		`\_ /tmp/T/002/gridlink node --name alice-das3v-n1 --hub 198.51.100.10:7946 --ca /tmp/T/001/alice/ca.pem`: false,
		`\_ /tmp/T/002/gridlink exec g5k-fe cat slurm-1.out`:                                                      false,
		`\_ -sh`: false,
	} {
		if got := jobLeftover.MatchString(line); got != want {
			t.Errorf("%q: killed with the job %v, want %v", line, got, want)
		}
	}
}
