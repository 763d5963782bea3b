// Package cluster runs unmodified cluster software across lab hosts the way
// a grid user would: an OpenSSH server on every host (keys made per run),
// the hosts known to each other by name, MPI jobs (Debian's Open MPI and
// mpi4py) launched by mpirun over ssh, and a file system mounted across
// sites (sshfs; NFS where the kernel can serve it inside a namespace,
// ProbeNFS says). It owns the per-run scratch directory, the sshds, the
// hosts file, ssh configuration and MPI hostfile it writes there, the
// mpi4py program (mpi/allreduce.py) and the Debian packages all of it
// needs (Install).
//
// It knows nothing of the network beneath: a Host is a name, the address
// that name stands for and the network namespace to run in. On plain lab
// addressing they come from FromTopology; on the virtual network they are
// the nodes' NODE.grid names, their virtual addresses and the namespaces
// of the nodes that hold them, and the MPI traffic is pinned to the
// virtual prefix (Config.Net).
//
// Every process the cluster starts runs inside a lab namespace
// (`ip netns exec`), in a UTS namespace of its own whose host name is
// the Host's name (MPI tells hosts apart by it; all lab hosts share one
// kernel) and with the cluster's hosts file bind-mounted over /etc/hosts
// in a mount namespace of its own: nothing of it is visible outside.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Host is one machine of the cluster.
type Host struct {
	Name string     // what programs call it: hostfiles, ssh, mount (e.g. g5k-n1 or g5k-n1.grid)
	Addr netip.Addr // the address Name stands for (in the hosts file)
	NS   string     // the network namespace its processes run in
}

// FromTopology gives lab hosts their lab ID as name and their primary
// address, in their own namespaces: the cluster on plain lab addressing.
func FromTopology(hosts ...*topology.Host) []Host {
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		out[i] = Host{Name: h.ID(), Addr: h.PrimaryAddr(), NS: lab.HostNS(h)}
	}
	return out
}

// Config says what the cluster is made of. Hosts is required; the zero
// value of the rest works.
type Config struct {
	Hosts []Host
	// Dir is the scratch directory for keys, configuration, logs and
	// programs (a test's t.TempDir()); it must exist.
	Dir string
	// Port is the sshds' port, 2222 by default (not 22, where a lab
	// topology's own sshd may listen).
	Port int
	// Net is the prefix MPI's TCP traffic (Open MPI's btl and oob) is
	// pinned to; by default the smallest IPv4 prefix holding every Host's
	// address, at least a /24.
	Net netip.Prefix
	// SystemNames leaves /etc/hosts alone: names resolve as the
	// namespace resolves them (NODE.grid by the node's DNS responder on
	// the virtual network). By default the cluster's hosts file is
	// bind-mounted over /etc/hosts.
	SystemNames bool
	// Agent, if set, is the remote shell MPI launches its daemons with
	// in place of ssh, as argv (e.g. gridlink exec): Start then starts
	// no sshd and makes no ssh key, and the hosts must already run what
	// the agent reaches (gridlink node --allow-exec, under HostWrap so
	// that what it starts has the host's name and the hosts file).
	Agent []string
}

// Cluster is a running set of sshds and the files that make the hosts
// one cluster.
type Cluster struct {
	cfg   Config
	sshds []*exec.Cmd
}

// Files of the scratch directory.
const (
	hostsFile     = "hosts"       // NAME ADDR lines, bind-mounted over /etc/hosts
	sshConfigFile = "ssh_config"  // what clients use: ssh -F
	knownHosts    = "known_hosts" // every host's own host key, under its name and address
	clientKey     = "id_ed25519"  // the one client key, authorized on every host
	authorized    = "authorized_keys"
)

// Start writes the cluster's files into cfg.Dir and starts an sshd on
// every host, returning once all of them accept connections.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("cluster: no hosts")
	}
	if cfg.Dir == "" {
		return nil, errors.New("cluster: no scratch directory")
	}
	if cfg.Port == 0 {
		cfg.Port = 2222
	}
	if !cfg.Net.IsValid() {
		cfg.Net = coveringPrefix(cfg.Hosts)
	}
	seen := map[string]bool{}
	for _, h := range cfg.Hosts {
		if h.Name == "" || !h.Addr.IsValid() || h.NS == "" {
			return nil, fmt.Errorf("cluster: host %+v needs a name, an address and a namespace", h)
		}
		if seen[h.Name] {
			return nil, fmt.Errorf("cluster: host name %s given twice", h.Name)
		}
		seen[h.Name] = true
	}
	c := &Cluster{cfg: cfg}
	if len(cfg.Agent) > 0 {
		// no ssh: only the hosts file, written in place (an agent's
		// namespace may have it bind-mounted already)
		return c, c.writeFile(hostsFile, hostsText(cfg.Hosts), 0o644)
	}
	if err := c.writeFiles(); err != nil {
		return nil, err
	}
	if err := c.startSSHDs(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close stops the sshds.
func (c *Cluster) Close() error {
	for _, cmd := range c.sshds {
		stopGroup(cmd, 3*time.Second)
	}
	c.sshds = nil
	return nil
}

// Hosts are the cluster's hosts, in the order given.
func (c *Cluster) Hosts() []Host { return append([]Host(nil), c.cfg.Hosts...) }

// Net is the prefix MPI traffic is pinned to.
func (c *Cluster) Net() netip.Prefix { return c.cfg.Net }

// Dir is the scratch directory.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// SSHConfig is the ssh client configuration file (ssh -F) that reaches
// every host by name as root, with the run's key and strict host keys.
func (c *Cluster) SSHConfig() string { return c.path(sshConfigFile) }

// HostsFile is the hosts file every process of the cluster sees as
// /etc/hosts.
func (c *Cluster) HostsFile() string { return c.path(hostsFile) }

func (c *Cluster) path(name string) string { return filepath.Join(c.cfg.Dir, name) }

// Host returns the named host.
func (c *Cluster) Host(name string) (Host, error) {
	for _, h := range c.cfg.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, &UnknownHostError{Name: name}
}

// UnknownHostError is a host name the cluster does not have.
type UnknownHostError struct{ Name string }

func (e *UnknownHostError) Error() string { return "cluster: no host named " + e.Name }

// Command is argv to run on host name, as the cluster runs everything:
// in the host's network namespace, under the host's name, with the
// cluster's hosts file as /etc/hosts. The process leads a process group
// of its own.
func (c *Cluster) Command(ctx context.Context, name string, argv ...string) (*exec.Cmd, error) {
	h, err := c.Host(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "ip", c.wrap(h, argv)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

// wrap is the ip(8) argument list that runs argv in h: `ip netns exec`
// gives a mount namespace of its own (its mounts do not leave it),
// unshare a UTS namespace for the host name.
func (c *Cluster) wrap(h Host, argv []string) []string {
	hosts := c.HostsFile()
	if c.cfg.SystemNames {
		hosts = ""
	}
	return append(append([]string{"netns", "exec", h.NS}, HostWrap(h.Name, hosts)...), argv...)
}

// HostWrap is the command line, to run inside a host's namespace (after
// `ip netns exec NS`), that runs the words after it as the cluster runs
// everything on host name: in a UTS namespace of its own with name as
// its host name, and with hostsFile bind-mounted over /etc/hosts ("":
// /etc/hosts left alone). Everything the process starts inherits both:
// a node agent started so (matrix.Options.Wrap) runs gridlink exec's
// commands as on that host. The hosts file may be written later, in
// place (Start does so), but it must exist.
func HostWrap(name, hostsFile string) []string {
	script := `hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"`
	if hostsFile == "" {
		script = `hostname "$1" && shift 2 && exec "$@"`
	}
	return []string{"unshare", "--uts", "--", "sh", "-c", script, "sh", name, hostsFile}
}

// HostsFileIn is the path of the hosts file a cluster with scratch
// directory dir writes (Start), for HostWrap before the cluster starts:
// create it first.
func HostsFileIn(dir string) string { return filepath.Join(dir, hostsFile) }

// Run runs argv on host name and returns its standard output; an error
// carries its standard error.
func (c *Cluster) Run(ctx context.Context, name string, argv ...string) ([]byte, error) {
	cmd, err := c.Command(ctx, name, argv...)
	if err != nil {
		return nil, err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return out, &RunError{Host: name, Argv: argv, Err: err, Stderr: strings.TrimSpace(errb.String())}
	}
	return out, nil
}

// RunError is a command of the cluster that failed.
type RunError struct {
	Host   string
	Argv   []string
	Err    error
	Stderr string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("on %s: %s: %v: %s", e.Host, strings.Join(e.Argv, " "), e.Err, e.Stderr)
}

func (e *RunError) Unwrap() error { return e.Err }

// SSH runs the remote command line cmdline on host to, from host from,
// by name through the cluster's ssh configuration.
func (c *Cluster) SSH(ctx context.Context, from, to, cmdline string) ([]byte, error) {
	return c.Run(ctx, from, "ssh", "-F", c.SSHConfig(), to, cmdline)
}

// stopGroup ends cmd's process group: SIGTERM, then SIGKILL after grace.
func stopGroup(cmd *exec.Cmd, grace time.Duration) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// coveringPrefix is the smallest IPv4 prefix, /24 at most, that holds
// every host's address.
func coveringPrefix(hosts []Host) netip.Prefix {
	for bits := 24; bits > 0; bits-- {
		p, _ := hosts[0].Addr.Prefix(bits)
		all := true
		for _, h := range hosts[1:] {
			all = all && p.Contains(h.Addr)
		}
		if all {
			return p
		}
	}
	p, _ := hosts[0].Addr.Prefix(0)
	return p
}

// writeFile writes a file of the scratch directory.
func (c *Cluster) writeFile(name string, data []byte, mode os.FileMode) error {
	return os.WriteFile(c.path(name), data, mode)
}
