package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A Slurm cluster of Debian's slurm-wlm in lab namespaces: munged for
// its credentials, slurmctld on a frontend and slurmd on the nodes, every
// file of theirs (configuration, key, state, spool, logs, sockets, pid
// files) in a scratch directory: the lab's namespaces share this
// machine's file system, so nothing may go to /etc/slurm, /var/spool or
// /run/munge. A process that must find the configuration where Slurm's
// commands look for it (/etc/slurm/slurm.conf: sbatch run by a node
// agent's exec service) runs under SlurmWrap, which bind-mounts the
// scratch directory's etc over /etc/slurm in a mount namespace of its
// own. Processes are tracked by their parents (proctrack/linuxproc), no
// task plugin: no cgroup is needed.

// SlurmConfig says what the Slurm cluster is made of.
type SlurmConfig struct {
	Name       string // the cluster's name (ClusterName)
	Controller Host   // runs slurmctld (and the frontend's commands)
	Nodes      []Host // run slurmd; their Names are Slurm's node names
	// Dir is the scratch directory (a test's t.TempDir()); it must exist
	// and be reachable by the jobs' users (Slurm writes their output
	// where they submit, not here).
	Dir string
	// Etc is where slurm.conf and the hosts file go, Dir/etc by default:
	// another cluster's Etc takes this cluster's configuration in its
	// place once that one is closed, so that a frontend whose processes
	// run under SlurmWrap with it (its node agent, whose exec service
	// runs sbatch) now sees this cluster's (one cluster's at a time).
	Etc string
}

// Slurm is a running Slurm cluster.
type Slurm struct {
	cfg   SlurmConfig
	procs []*daemon
}

// daemon is a started daemon of the cluster: done is closed once it
// exited, err is then how.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startWatched starts cmd in a process group of its own and waits for its
// end in the background.
func startWatched(name string, cmd *exec.Cmd) (*daemon, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	return d, nil
}

// stop ends the daemon's process group: SIGTERM, then SIGKILL after
// grace.
func (d *daemon) stop(grace time.Duration) {
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

// SlurmPackages are the Debian packages a Slurm cluster needs.
var SlurmPackages = []string{"slurmctld", "slurmd", "slurm-client", "munge"}

// slurmConf is slurm.conf: the controller, the nodes, munge through the
// run's socket, everything else in the scratch directory; no cgroups, no
// accounting.
const slurmConf = `# written by package cluster
ClusterName=%[1]s
SlurmctldHost=%[2]s(%[3]s)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s/munge/munge.socket
CredType=cred/munge
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool/%%n
SlurmctldPidFile=%[4]s/run/slurmctld.pid
SlurmdPidFile=%[4]s/run/slurmd-%%n.pid
SlurmctldLogFile=%[4]s/log/slurmctld.log
SlurmdLogFile=%[4]s/log/slurmd-%%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
SlurmctldDebug=info
SlurmdDebug=info
%[5]sPartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`

// Dirs of the scratch directory.
func (s *Slurm) path(p ...string) string { return filepath.Join(append([]string{s.cfg.Dir}, p...)...) }

// Etc is the directory the frontend's processes see as /etc/slurm.
func (s *Slurm) Etc() string {
	if s.cfg.Etc != "" {
		return s.cfg.Etc
	}
	return s.path("etc")
}

// HostsFile names the controller and the nodes (for SlurmWrap).
func (s *Slurm) HostsFile() string { return filepath.Join(s.Etc(), "hosts") }

// Conf is slurm.conf.
func (s *Slurm) Conf() string { return filepath.Join(s.Etc(), "slurm.conf") }

// Log is a daemon's log: "slurmctld", "slurmd-NODE" or "munged-HOST".
func (s *Slurm) Log(name string) string { return s.path("log", name+".log") }

// SlurmWrap is the command line, to run inside the frontend's namespace
// (after `ip netns exec NS`), that runs the words after it under host
// name and with etc (Slurm.Etc) bind-mounted over /etc/slurm, and with
// hostsFile over /etc/hosts unless it is "" (HostWrap's). /etc/slurm is
// made if the machine has none.
func SlurmWrap(name, etc, hostsFile string) []string {
	script := `hostname "$1" && mount --bind "$2" /etc/slurm && { [ -z "$3" ] || mount --bind "$3" /etc/hosts; } && shift 3 && exec "$@"`
	return []string{"unshare", "--uts", "--", "sh", "-c", script, "sh", name, etc, hostsFile}
}

// PrepareSlurm writes the cluster's files into cfg.Dir (the
// configuration, munge's key) and returns the cluster, not started:
// Etc exists from here on, for SlurmWrap.
func PrepareSlurm(cfg SlurmConfig) (*Slurm, error) {
	if cfg.Name == "" || cfg.Controller.Name == "" || len(cfg.Nodes) == 0 || cfg.Dir == "" {
		return nil, errors.New("cluster: a Slurm cluster needs a name, a controller, nodes and a scratch directory")
	}
	s := &Slurm{cfg: cfg}
	dirs := []string{s.Etc(), s.path("munge"), s.path("state"), s.path("spool"), s.path("run"), s.path("log")}
	for _, n := range cfg.Nodes {
		dirs = append(dirs, s.path("spool", n.Name))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll("/etc/slurm", 0o755); err != nil {
		return nil, err
	}
	var nodes strings.Builder
	for _, n := range cfg.Nodes {
		fmt.Fprintf(&nodes, "NodeName=%s NodeAddr=%s CPUs=1 RealMemory=64 State=UNKNOWN\n", n.Name, n.Addr)
	}
	conf := fmt.Sprintf(slurmConf, cfg.Name, cfg.Controller.Name, cfg.Controller.Addr, cfg.Dir, nodes.String())
	if err := os.WriteFile(s.Conf(), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	// the daemons look their own names up (munged its origin address):
	// a hosts file answers, and a resolver that fails at once, not a
	// name server the lab's namespace cannot reach
	if err := os.WriteFile(s.HostsFile(), hostsText(append([]Host{cfg.Controller}, cfg.Nodes...)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.path("run", "resolv.conf"), []byte("# written by package cluster\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		return nil, err
	}
	// munged wants its key and directories its own user's, not readable
	// by others
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	return s, os.WriteFile(s.path("munge", "munge.key"), key, 0o600)
}

// Start starts munged (one for all the hosts: they share a kernel and a
// file system, and munge's socket is a path), slurmctld on the
// controller and slurmd on every node, and returns once the controller
// answers and every node is idle.
func (s *Slurm) Start(ctx context.Context) error {
	for _, b := range []string{"munged", "slurmctld", "slurmd", "sinfo"} {
		if _, err := exec.LookPath(b); err != nil {
			if _, err := exec.LookPath("/usr/sbin/" + b); err != nil {
				return &MissingError{What: b, Package: "slurm-wlm (" + strings.Join(SlurmPackages, " ") + ")"}
			}
		}
	}
	munge := s.path("munge")
	mungeArgs := []string{"--foreground", "--force", "--socket=" + munge + "/munge.socket", "--key-file=" + munge + "/munge.key",
		"--pid-file=" + munge + "/munged.pid", "--seed-file=" + munge + "/munged.seed", "--log-file=" + s.Log("munged")}
	if u, err := user.Lookup("munge"); err == nil {
		// munged runs as its own user where the package made one
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{munge, filepath.Join(munge, "munge.key")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return err
			}
		}
		_ = os.WriteFile(s.Log("munged"), nil, 0o640)
		_ = os.Chown(s.Log("munged"), uid, gid)
		_ = os.Chmod(munge, 0o755)
		mungeArgs = append([]string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "/usr/sbin/munged"}, mungeArgs...)
	} else {
		mungeArgs = append([]string{"/usr/sbin/munged"}, mungeArgs...)
	}
	munged, err := s.start(s.cfg.Controller, "munged", mungeArgs)
	if err != nil {
		return err
	}
	if err := waitFile(ctx, filepath.Join(munge, "munge.socket"), mungeWait, munged); err != nil {
		return s.failed("munged", err)
	}
	if _, err := s.start(s.cfg.Controller, "slurmctld", []string{"slurmctld", "-D", "-i", "-f", s.Conf()}); err != nil {
		return err
	}
	for _, n := range s.cfg.Nodes {
		if _, err := s.start(n, "slurmd-"+n.Name, []string{"slurmd", "-D", "-f", s.Conf(), "-N", n.Name}); err != nil {
			return err
		}
	}
	// every node idle, as sinfo on the controller sees it
	deadline := time.Now().Add(idleWait)
	ictx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		out, err := s.Run(ictx, "sinfo", "--noheader", "--Node", "--format=%N %t")
		idle := 0
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		if err == nil && idle == len(s.cfg.Nodes) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			why := fmt.Errorf("the nodes are not idle after %v: sinfo: %v %s", idleWait, err, out)
			if ctx.Err() != nil {
				why = fmt.Errorf("the nodes are not idle when the caller's time ran out (%w): sinfo: %v %s", ctx.Err(), err, out)
			}
			return s.failed("slurmctld", fmt.Errorf("%w\n%s", why, s.Logs()))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Run runs a Slurm command on the controller (under SlurmWrap) and
// returns its output; SlurmCommandTimeout bounds it (a *TimeoutError).
func (s *Slurm) Run(ctx context.Context, argv ...string) ([]byte, error) {
	h := s.cfg.Controller
	full := append(append([]string{"netns", "exec", h.NS}, SlurmWrap(h.Name, s.Etc(), s.HostsFile())...), argv...)
	out, errb, err := runBounded(ctx, SlurmCommandTimeout, h.Name, argv, "", func(ctx context.Context) (*exec.Cmd, error) {
		return exec.CommandContext(ctx, "ip", full...), nil
	}, nil)
	out = append(out, errb...)
	var te *TimeoutError
	if errors.As(err, &te) {
		return out, err
	}
	if err != nil {
		return out, &RunError{Host: h.Name, Argv: argv, Err: err, Stderr: strings.TrimSpace(string(out))}
	}
	return out, nil
}

// start starts the daemon argv on h, logging to Log(name): in h's network
// namespace (nsenter, not `ip netns exec`, which mounts a sysfs of the
// namespace's own, where no cgroup file system is: slurmd refuses to
// start without one, "No filesystem mounted on /sys/fs/cgroup", even
// with no cgroup plugin configured), under h's name and with Etc as
// /etc/slurm, HostsFile as /etc/hosts and a resolver that fails at once
// in a mount namespace of its own. That namespace gets a sysfs of h's
// network namespace too, with the machine's cgroup mounts moved onto it:
// the jobs' programs find h's network devices under /sys/class/net (UCX,
// which Debian's MPICH runs on, takes only the devices it finds there: in
// the machine's sysfs, h's gridlink0 is "not available").
func (s *Slurm) start(h Host, name string, argv []string) (*daemon, error) {
	logf, err := os.OpenFile(s.path("log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	script := `hostname "$1" && mount --bind "$2" /etc/slurm && mount --bind "$3" /etc/hosts && mount --bind "$4" /etc/resolv.conf &&
c=$(mktemp -d) && mount --rbind /sys/fs/cgroup "$c" && umount -l /sys && mount -t sysfs sysfs /sys && mount --move "$c" /sys/fs/cgroup && rmdir "$c" &&
shift 4 && exec "$@"`
	full := append([]string{"--net=" + filepath.Join("/run/netns", h.NS), "--", "unshare", "--mount", "--uts", "--",
		"sh", "-c", script, "sh", h.Name, s.Etc(), s.HostsFile(), s.path("run", "resolv.conf")}, argv...)
	cmd := exec.Command("nsenter", full...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d, err := startWatched(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("cluster: start %s on %s: %w", name, h.Name, err)
	}
	s.procs = append(s.procs, d)
	return d, nil
}

// failed is err with the tail of what daemon said.
func (s *Slurm) failed(daemon string, err error) error {
	var b strings.Builder
	for _, f := range []string{s.Log(daemon), s.path("log", daemon+".out")} {
		if log, rerr := os.ReadFile(f); rerr == nil && len(log) > 0 {
			fmt.Fprintf(&b, "\n--- %s ---\n%s", filepath.Base(f), lastLines(string(log), 15))
		}
	}
	return fmt.Errorf("cluster: %s: %w%s", daemon, err, b.String())
}

// Logs are the tails of every daemon's logs, for a test's failure report.
func (s *Slurm) Logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(s.path("log", "*"))
	for _, f := range files {
		if log, err := os.ReadFile(f); err == nil && len(log) > 0 {
			fmt.Fprintf(&b, "--- %s ---\n%s\n", filepath.Base(f), lastLines(string(log), 15))
		}
	}
	return b.String()
}

// Close stops the daemons, nodes first.
func (s *Slurm) Close() error {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop(5 * time.Second)
	}
	s.procs = nil
	return nil
}

// Bounds of Start's waits.
const (
	// mungeWait bounds munged's start, to its socket: it takes some
	// 10-50 ms (the key read, the PRNG seeded from the seed file or
	// /dev/urandom, the socket made), a few seconds on a loaded machine.
	mungeWait = 10 * time.Second
	// idleWait bounds the wait for every node to be idle.
	idleWait = 60 * time.Second
)

// waitFile waits until d has made path, for at most timeout: an error
// says which ended the wait, the timeout, ctx (the caller's time ran out,
// which says nothing of the daemon) or d's exit.
func waitFile(ctx context.Context, path string, timeout time.Duration, d *daemon) error {
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s: the caller's time ran out %v into the wait: %w", path, time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("no %s after %v", path, timeout)
		case <-d.done:
			if _, err := os.Stat(path); err == nil {
				return nil
			}
			return &ExitedError{Daemon: d.name, Path: path, Err: d.err}
		case <-tick.C:
		}
	}
}

// ExitedError is a daemon that ended before it made the file the wait
// was for.
type ExitedError struct {
	Daemon string
	Path   string
	Err    error // how it ended (nil: status 0)
}

func (e *ExitedError) Error() string {
	how := "with status 0"
	if e.Err != nil {
		how = e.Err.Error()
	}
	return fmt.Sprintf("%s ended (%s) before it made %s", e.Daemon, how, e.Path)
}

func (e *ExitedError) Unwrap() error { return e.Err }
