package gridlink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// VIPExecConfig is what VIPExec runs, and with which agent.
type VIPExecConfig struct {
	// Control is the agent's control socket; empty: the caller's own
	// agent (control.Dial's default).
	Control string
	// Argv is the program and its arguments (looked up in PATH).
	Argv []string
	// NoNames leaves the names out: no resolv.conf of the namespace's
	// own, no name server in it.
	NoNames bool
}

// VIPChildArg is the first argument of the re-executed binary that sets
// the namespace up (cli.Main hands it to VIPNamespaceChild).
const VIPChildArg = "__gridlink-vip-namespace"

// vipSetupEnv carries the setup to the child.
const vipSetupEnv = "GRIDLINK_VIP_SETUP"

// VIPAddrsEnv is set in the program's environment: the node's virtual
// addresses, comma-separated.
const VIPAddrsEnv = "GRIDLINK_VIP_ADDRS"

// childSetup is what the child puts in the namespace.
type childSetup struct {
	control.VIPSetup
	GID int `json:"gid"`
}

// VIPExec runs cfg.Argv in a user, network and mount namespace of its
// own (no root needed where the kernel allows unprivileged user
// namespaces and /dev/net/tun): the namespace holds a TUN device with the
// node's virtual addresses, routes of the virtual prefixes through it and
// its loopback up; the caller's agent runs the node's virtual network on
// the device while the program runs, and, unless NoNames, serves the
// names on the namespace's 127.0.0.153:53, which the namespace's own
// /etc/resolv.conf names. The program runs as the caller (the same uid
// and gid, mapped to themselves) without capabilities. It returns the
// program's exit code (128+N for a signal N); an error when it could not
// be started (a *VIPNamespaceError saying what the kernel forbids, a
// *control.StreamError from the agent).
func VIPExec(ctx context.Context, cfg VIPExecConfig) (int, error) {
	if len(cfg.Argv) == 0 {
		return 0, errors.New("gridlink vip exec: no program to run")
	}
	if err := tunAccess(os.Geteuid(), tunPath); err != nil {
		return 0, err
	}
	dev, err := control.Dial(cfg.Control).VIPDevice(ctx, control.VIPRequest{Names: !cfg.NoNames})
	if err != nil {
		return 0, err
	}
	defer dev.Close()
	setup, _ := json.Marshal(childSetup{VIPSetup: dev.Setup, GID: os.Getegid()})
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("gridlink vip exec: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "vip exec parent"), os.NewFile(uintptr(pair[1]), "vip exec child")
	defer ours.Close()
	self, err := os.Executable()
	if err != nil {
		theirs.Close()
		return 0, err
	}
	cmd := exec.Command(self, append([]string{VIPChildArg, "--"}, cfg.Argv...)...)
	cmd.Env = append(os.Environ(), vipSetupEnv+"="+string(setup))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs}
	uid, gid := os.Geteuid(), os.Getegid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		// the setup needs these in the namespace; the program gets none
		AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN, unix.CAP_NET_BIND_SERVICE},
	}
	// the terminal sends ^C and ^\ to the program as well; other
	// signals are passed on
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return 0, diagnoseClone(err)
	}
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM || s == syscall.SIGHUP {
				_ = cmd.Process.Signal(s)
			}
		}
	}()
	if err := handDevice(ours, dev, cmd.Process.Pid); err != nil {
		_ = cmd.Wait()
		return 0, err
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// handDevice takes the child's device and name sockets, hands them to the
// agent and tells the child to go on ('G') or stop ('E').
func handDevice(ours *os.File, dev *control.VIPDevice, pid int) error {
	c, err := net.FileConn(ours)
	ours.Close() // c holds its own: the child sees the end when c closes
	if err != nil {
		return err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(control.MaxVIPFDs*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return &VIPNamespaceError{Step: "set up the namespace", Err: fmt.Errorf("the namespace's setup ended without a word: %v", err)}
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "handed")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if buf[0] == 'E' {
		var ce childError
		if err := json.Unmarshal(buf[1:n], &ce); err != nil {
			return &VIPNamespaceError{Step: "set up the namespace", Err: errors.New(string(buf[1:n]))}
		}
		return diagnoseChild(ce.err())
	}
	if buf[0] != 'F' || len(files) == 0 {
		_, _ = uc.Write([]byte("E"))
		return &VIPNamespaceError{Step: "set up the namespace", Err: fmt.Errorf("unexpected answer %q with %d descriptors", buf[:1], len(files))}
	}
	if err := dev.Hand(pid, files...); err != nil {
		_, _ = uc.Write([]byte("E"))
		return err
	}
	_, err = uc.Write([]byte("G"))
	return err
}

// VIPNamespaceChild sets the namespace up and runs the program: the
// re-executed binary's work (args: "--", the program and its arguments).
// It never returns.
func VIPNamespaceChild(args []string) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	sock := os.NewFile(3, "vip exec parent")
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil || len(args) == 0 {
		fmt.Fprintln(os.Stderr, "gridlink: "+VIPChildArg+" is started by gridlink vip exec only")
		os.Exit(126)
	}
	uc := c.(*net.UnixConn)
	report := func(step string, err error) {
		ce := childError{Step: step, Msg: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			ce.Errno = int(errno)
		}
		b, _ := json.Marshal(ce)
		_, _ = uc.Write(append([]byte("E"), b...))
		os.Exit(126)
	}
	var setup childSetup
	if err := json.Unmarshal([]byte(os.Getenv(vipSetupEnv)), &setup); err != nil {
		report("read the setup", err)
	}
	os.Unsetenv(vipSetupEnv)
	files, err := setupNamespace(setup)
	if err != nil {
		var ne *VIPNamespaceError
		if errors.As(err, &ne) {
			report(ne.Step, ne.Err)
		}
		report("set up the namespace", err)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	if _, _, err := uc.WriteMsgUnix([]byte("F"), unix.UnixRights(fds...), nil); err != nil {
		os.Exit(126)
	}
	var b [1]byte
	if n, err := uc.Read(b[:]); err != nil || n != 1 || b[0] != 'G' {
		os.Exit(126) // the parent says why
	}
	uc.Close()
	for _, f := range files {
		f.Close()
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gridlink vip exec: %v\n", err)
		os.Exit(127)
	}
	os.Setenv(VIPAddrsEnv, strings.Join(setup.Addrs, ","))
	execWithoutCaps(path, args)
}

// errnoOf is err's errno, if it has one.
func errnoOf(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	ok := errors.As(err, &e)
	return e, ok
}
