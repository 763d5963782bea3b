package cluster

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Mount is a remote directory mounted on a host of the cluster by sshfs.
// The mount lives in the mount namespace of its sshfs process (each
// process the cluster starts has its own), so commands that use it run
// through Run, which enters that namespace.
type Mount struct {
	Client, Server string // host names
	Remote         string // the directory on the server
	Dir            string // where the client sees it
	c              *Cluster
	cmd            *exec.Cmd     // sshfs -f; only the goroutine that closes exited waits for it
	exited         chan struct{} // closed when sshfs has exited
	log            string
}

// MountSSHFS mounts server's directory remote on client at dir (made if
// missing) with sshfs over the cluster's ssh, by the server's name, and
// returns once the mount is in place.
func (c *Cluster) MountSSHFS(ctx context.Context, client, server, remote, dir string) (*Mount, error) {
	if _, err := exec.LookPath("sshfs"); err != nil {
		return nil, &MissingError{What: "sshfs", Package: "sshfs"}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, &MissingError{What: "/dev/fuse (" + err.Error() + ")", Package: "fuse3, and a kernel with FUSE"}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := &Mount{Client: client, Server: server, Remote: remote, Dir: dir, c: c, log: c.path("sshfs-" + client + ".log")}
	logf, err := os.Create(m.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd, err := c.Command(context.Background(), client, "sshfs", "-f", "-F", c.SSHConfig(), server+":"+remote, dir)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sshfs on %s: %w", client, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	exited := m.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if fstype, ok := mountedAt(cmd.Process.Pid, dir); ok {
			if fstype != "fuse.sshfs" {
				m.Close()
				return nil, fmt.Errorf("cluster: %s on %s is %s, not fuse.sshfs", dir, client, fstype)
			}
			return m, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(m.log)
			return nil, fmt.Errorf("cluster: sshfs %s:%s on %s exited: %s", server, remote, client, strings.TrimSpace(string(log)))
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			log, _ := os.ReadFile(m.log)
			return nil, fmt.Errorf("cluster: sshfs %s:%s not mounted on %s after 15s: %s", server, remote, client, log)
		}
	}
}

// mountedAt returns the file system type of the mount at dir as process
// pid sees it.
func mountedAt(pid int, dir string) (string, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				return fields[i+1], true
			}
		}
	}
	return "", false
}

// Run runs argv on the client with the mount in view (nsenter into the
// sshfs process's mount, network and UTS namespaces) and returns its
// standard output.
func (m *Mount) Run(ctx context.Context, argv ...string) ([]byte, error) {
	pid := fmt.Sprint(m.cmd.Process.Pid)
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", pid, "-m", "-n", "-u", "--"}, argv...)...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return out, &RunError{Host: m.Client, Argv: argv, Err: err, Stderr: strings.TrimSpace(errb.String())}
	}
	return out, nil
}

// Close unmounts (fusermount3 -u in the mount's namespace) and ends sshfs.
func (m *Mount) Close() error {
	if m.cmd == nil || m.cmd.Process == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := m.Run(ctx, "fusermount3", "-u", m.Dir)
	select {
	case <-m.exited:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.exited
	}
	m.cmd = nil
	return err
}

// NFSProbe is what this machine's kernel can do for NFS inside a lab
// namespace, and the evidence.
type NFSProbe struct {
	Server   bool     // knfsd: the nfsd file system mounts in the namespace
	Client   bool     // the kernel's NFS client: an nfs or nfs4 file system type
	FUSE     bool     // /dev/fuse and the fuse file system type: sshfs can mount
	Evidence []string // each check and what it found, in words
}

// ProbeNFS checks, inside namespace ns, whether the kernel can serve NFS
// (knfsd is per network namespace in recent kernels: mounting the nfsd
// file system at /proc/fs/nfsd is what rpc.nfsd does first) and mount it,
// and whether FUSE is there for sshfs instead.
func ProbeNFS(ctx context.Context, ns string) NFSProbe {
	var p NFSProbe
	say := func(format string, args ...any) { p.Evidence = append(p.Evidence, fmt.Sprintf(format, args...)) }
	var uts syscall.Utsname
	if syscall.Uname(&uts) == nil {
		say("kernel %s", utsString(uts.Release[:]))
	}
	fs, _ := os.ReadFile("/proc/filesystems")
	types := map[string]bool{}
	for _, line := range strings.Split(string(fs), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			types[f[len(f)-1]] = true
		}
	}
	var nfsTypes []string
	for _, t := range []string{"nfsd", "nfs", "nfs4", "fuse"} {
		if types[t] {
			nfsTypes = append(nfsTypes, t)
		}
	}
	say("/proc/filesystems has of nfsd, nfs, nfs4, fuse: %v", nfsTypes)
	p.Client = types["nfs"] || types["nfs4"]
	say("kernel configuration: %s", kernelConfig("CONFIG_MODULES", "CONFIG_NFSD", "CONFIG_NFS_FS", "CONFIG_SUNRPC", "CONFIG_FUSE_FS"))
	if _, err := exec.LookPath("modprobe"); err != nil {
		say("modprobe: not installed")
	} else if out, err := exec.CommandContext(ctx, "modprobe", "nfsd").CombinedOutput(); err != nil {
		say("modprobe nfsd: %v: %s", err, strings.TrimSpace(string(out)))
	} else {
		say("modprobe nfsd: loaded")
	}
	// in the namespace, in a mount namespace of its own (ip netns exec's)
	script := `mount -t nfsd nfsd /proc/fs/nfsd && ls /proc/fs/nfsd && if command -v rpc.nfsd >/dev/null; then rpc.nfsd 0; fi`
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput()
	text := strings.Join(strings.Fields(string(out)), " ")
	if err != nil {
		say("in %s: mount -t nfsd nfsd /proc/fs/nfsd: %v: %s", ns, err, text)
	} else {
		p.Server = true
		say("in %s: the nfsd file system mounts: %s", ns, text)
	}
	if !p.Client {
		// what mount says without the client (it fails before any I/O;
		// with the client it would try the network, so it is not run)
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "mount", "-t", "nfs4", "127.0.0.1:/", "/mnt").CombinedOutput()
		say("in %s: mount -t nfs4: %v: %s", ns, err, strings.Join(strings.Fields(string(out)), " "))
	}
	if _, err := os.Stat("/proc/net/rpc"); err != nil {
		say("/proc/net/rpc: %v (no sunrpc in the kernel)", err)
	}
	_, ferr := os.Stat("/dev/fuse")
	p.FUSE = ferr == nil && types["fuse"]
	say("/dev/fuse: %v; fuse file system type: %v", errText(ferr), types["fuse"])
	return p
}

func errText(err error) string {
	if err == nil {
		return "present"
	}
	return err.Error()
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// kernelConfig reports the named options from /proc/config.gz: their
// values, "is not set", or absent.
func kernelConfig(names ...string) string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return "/proc/config.gz: " + err.Error()
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return "/proc/config.gz: " + err.Error()
	}
	found := map[string]string{}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if strings.HasPrefix(line, n+"=") || line == "# "+n+" is not set" {
				found[n] = line
			}
		}
	}
	var parts []string
	for _, n := range names {
		if v, ok := found[n]; ok {
			parts = append(parts, v)
		} else {
			parts = append(parts, n+" absent")
		}
	}
	return strings.Join(parts, ", ")
}

// Path is p inside the mount, for commands run through Run.
func (m *Mount) Path(p string) string { return filepath.Join(m.Dir, p) }
