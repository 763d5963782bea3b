package lab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// EmulateCmd is the hidden gridlab subcommand that runs the link emulator;
// Up starts `gridlab emulate` inside InetNS and Down stops it.
const EmulateCmd = "emulate"

// Options of Up.
type Options struct {
	Params map[string]string // parameter overrides, recorded in the state
	// Log receives progress notes (e.g. leftovers removed); nil discards.
	Log io.Writer
	// Executable is the gridlab binary that runs the emulator; "" means
	// the running program.
	Executable string
	// Owner, if not 0, is the process whose lab this is, for as long as
	// it lives (a test's): a lab left up by an owner that ended without
	// taking it down (a test killed on its timeout) is taken down by the
	// next Up that has an owner. A lab without one (gridlab up) stays
	// until gridlab down.
	Owner int
}

// ErrUp is returned by Up while a lab is up.
var ErrUp = errors.New("lab already up")

// Up builds topology t (whose text is src) and starts its link emulator.
// Leftovers of a crashed run are removed first; a lab that is still up is
// an error. On failure everything made so far is torn down again.
func Up(t *topology.Topology, src []byte, opt Options) (err error) {
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	if err := preflight(t); err != nil {
		return err
	}
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	if st, _ := ReadState(); st != nil && alive(st.EmulatorPID) {
		if opt.Owner == 0 || !st.ownerGone() {
			return fmt.Errorf("%w: lab %s, since %s, emulator pid %d%s: run gridlab down first",
				ErrUp, st.Topology, st.Started.Format(time.TimeOnly), st.EmulatorPID, ownerWords(st))
		}
		fmt.Fprintf(opt.Log, "gridlab: lab %s was left up by process %d, which ended without taking it down: taking it down\n", st.Topology, st.Owner)
		if _, err := down(); err != nil {
			return fmt.Errorf("take down lab %s left by process %d: %w", st.Topology, st.Owner, err)
		}
	}
	if left, err := Leftovers(); err != nil {
		return err
	} else if len(left) > 0 {
		fmt.Fprintf(opt.Log, "gridlab: removing leftovers of an earlier run: %s\n", strings.Join(left, " "))
		if _, err := down(); err != nil {
			return fmt.Errorf("remove leftovers: %w (remove them by hand: ip netns del NAME; rm -rf %s)", err, StateDir)
		}
	}
	defer func() {
		if err != nil {
			if _, derr := down(); derr != nil {
				err = fmt.Errorf("%w; tearing down also failed: %v", err, derr)
			}
		}
	}()
	for _, step := range Plan(t) {
		if err := run(step); err != nil {
			return err
		}
	}
	st := &State{Topology: t.Name, File: t.File, Source: string(src), Params: opt.Params, Started: time.Now()}
	if opt.Owner > 0 {
		start, ok := procStart(opt.Owner)
		if !ok {
			return fmt.Errorf("lab owner: no process %d", opt.Owner)
		}
		st.Owner, st.OwnerStart = opt.Owner, start
	}
	if err := writeState(st); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	pid, err := startEmulator(opt.Executable)
	if err != nil {
		return err
	}
	st.EmulatorPID = pid
	if err := writeState(st); err != nil {
		return err
	}
	if err := startSSHDs(t); err != nil {
		return err
	}
	return startIGDs(t)
}

// ownerWords says whose lab st is, if a process's.
func ownerWords(st *State) string {
	if st.Owner <= 0 {
		return ""
	}
	return fmt.Sprintf(", owned by process %d", st.Owner)
}

func preflight(t *topology.Topology) error {
	if os.Geteuid() != 0 {
		return errors.New("gridlab needs root: it creates network namespaces (run it with sudo)")
	}
	need := []string{"ip"}
	for _, s := range t.Sites {
		if Ruleset(s) != nil {
			need = append(need, "nft")
			break
		}
	}
	for _, tool := range need {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := map[string]string{"ip": "iproute2", "nft": "nftables"}[tool]
			return fmt.Errorf("gridlab needs %s: apt-get install %s (make deps installs everything)", tool, pkg)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("gridlab needs TUN devices for its wide-area links: %w", err)
	}
	if err := needIGD(t); err != nil {
		return err
	}
	if err := checkOverlap(t); err != nil {
		return err
	}
	return os.MkdirAll(StateDir, 0o755)
}

// checkOverlap refuses a topology whose internet addresses overlap a network
// this machine is really on: a mistaken send from the root namespace to such
// a lab address would go out on the real network.
func checkOverlap(t *topology.Topology) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			real, err := netip.ParsePrefix(ipn.String())
			if err != nil || !real.Addr().Is4() || real.Addr().IsLoopback() {
				continue
			}
			for _, s := range t.Sites {
				for _, p := range s.WANPrefixes() {
					if p.Overlaps(real.Masked()) {
						return fmt.Errorf("topology %s: site %s's address space %s overlaps this machine's network %s on %s; the lab must not share addresses with real networks",
							t.Name, s.Name, p, real.Masked(), ifi.Name)
					}
				}
			}
		}
	}
	return nil
}

// lock serializes gridlab commands that change the lab.
func lock() (func(), error) {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(StateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// run carries out one step of a plan.
func run(s Step) error {
	var cmd *exec.Cmd
	switch s.Tool {
	case "sysctl":
		kv := map[string]string{}
		for _, line := range s.Body {
			k, v, _ := strings.Cut(line, "=")
			kv[k] = v
		}
		return netns.WriteSysctl(s.NS, kv)
	case "ip":
		args := []string{"-batch", "-"}
		if s.NS != "" {
			args = append([]string{"-n", s.NS}, args...)
		}
		cmd = exec.Command("ip", args...)
	case "file":
		return writeEtc(s)
	case "nft":
		cmd = exec.Command("nft", "-f", "-")
		if s.NS != "" {
			cmd = exec.Command("ip", "netns", "exec", s.NS, "nft", "-f", "-")
		}
	default:
		return fmt.Errorf("lab: unknown tool %q", s.Tool)
	}
	cmd.Stdin = strings.NewReader(strings.Join(s.Body, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("lab: %s failed: %v\n%s\ncommands were:\n%s", s.What, err, bytes.TrimSpace(out), s.Shell())
	}
	return nil
}

// startEmulator runs `gridlab emulate` in InetNS as a daemon and waits until
// it says it is ready.
func startEmulator(exe string) (int, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return 0, err
		}
	}
	logf, err := os.OpenFile(LogPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", InetNS, exe, EmulateCmd, "--state", statePath())
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start link emulator: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(20 * time.Second):
		err = errors.New("not ready after 20s")
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log, _ := os.ReadFile(LogPath())
		return 0, fmt.Errorf("link emulator failed to start: %v\n%s", err, bytes.TrimSpace(log))
	}
	pid := cmd.Process.Pid
	// It lives on after gridlab up exits; a process that stays (a test
	// bringing labs up one after another) reaps it when it ends, rather
	// than keep a zombie per lab.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// Down tears down the lab and whatever a crashed run left: it stops the
// emulator and every process inside lab namespaces, deletes the namespaces
// (and with them every device and rule) and the state. It returns what it
// removed.
func Down() ([]string, error) {
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return down()
}

func down() ([]string, error) {
	names, err := netns.List(Prefix)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, ns := range names {
		pids = append(pids, pidsIn(ns)...)
	}
	if st, _ := ReadState(); st != nil && alive(st.EmulatorPID) {
		pids = append(pids, st.EmulatorPID)
	}
	stop(pids)
	var errs []error
	if len(names) > 0 {
		var b strings.Builder
		for _, ns := range names {
			fmt.Fprintf(&b, "netns del %s\n", ns)
		}
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del: %v: %s", err, bytes.TrimSpace(out)))
		}
	}
	if exec.Command("nft", "list", "table", "inet", GuardTable).Run() == nil { // the root namespace's guard
		if out, err := exec.Command("nft", "delete", "table", "inet", GuardTable).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table inet %s: %v: %s", GuardTable, err, bytes.TrimSpace(out)))
		}
	}
	sshLogs, _ := filepath.Glob(filepath.Join(StateDir, "sshd-*.log"))
	for _, f := range append(append([]string{statePath(), statePath() + ".tmp", SSHDir(), CADir()}, sshLogs...), igdFiles()...) {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := os.RemoveAll(f); err != nil {
			errs = append(errs, err)
		} else {
			names = append(names, f)
		}
	}
	names = append(names, removeNameLeftovers(EtcNetns)...)
	if left, _ := netns.List(Prefix); len(left) > 0 {
		errs = append(errs, fmt.Errorf("namespaces still there: %s", strings.Join(left, " ")))
	}
	return names, errors.Join(errs...)
}

// pidsIn lists the processes whose network namespace is the named one.
func pidsIn(ns string) []int {
	var st syscall.Stat_t
	if err := syscall.Stat(netns.Path(ns), &st); err != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net")); err == nil && link == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stop sends SIGTERM, then SIGKILL to those still there after 2 s.
func stop(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// state is the field after "(comm)".
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}
