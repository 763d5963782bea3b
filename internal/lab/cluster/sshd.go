package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/netns"
)

// sshdConfig is each host's sshd: its own host key, the run's client key
// authorized for root, keys only, listening on the host's address alone.
// LogLevel VERBOSE logs each accepted key and the address it came from;
// sftp (which sshfs speaks) is served in the sshd itself.
const sshdConfig = `# written by package cluster
ListenAddress %[1]s
HostKey %[2]s
AuthorizedKeysFile %[3]s
PidFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
LogLevel VERBOSE
Subsystem sftp internal-sftp
MaxStartups 64:30:128
`

// sshConfig is what the cluster's ssh clients use: root, the run's key,
// host keys checked strictly against the run's known_hosts only.
const sshConfig = `# written by package cluster
Host *
  User root
  Port %[1]d
  IdentityFile %[2]s
  IdentitiesOnly yes
  UserKnownHostsFile %[3]s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  PasswordAuthentication no
  ConnectTimeout 10
  LogLevel ERROR
`

// writeFiles writes the hosts file, the keys, known_hosts, the client's
// configuration and each host's sshd configuration.
func (c *Cluster) writeFiles() error {
	if err := c.writeFile(hostsFile, hostsText(c.cfg.Hosts), 0o644); err != nil {
		return err
	}
	clientPub, err := writeKey(c.path(clientKey))
	if err != nil {
		return err
	}
	if err := c.writeFile(authorized, ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		return err
	}
	var known strings.Builder
	for _, h := range c.cfg.Hosts {
		pub, err := writeKey(c.path("host_" + h.Name))
		if err != nil {
			return err
		}
		known.WriteString(knownHostsLine(h, c.cfg.Port, pub))
		conf := fmt.Sprintf(sshdConfig, hostPort(h.Addr, c.cfg.Port), c.path("host_"+h.Name), c.path(authorized))
		if err := c.writeFile("sshd_config_"+h.Name, []byte(conf), 0o600); err != nil {
			return err
		}
	}
	if err := c.writeFile(knownHosts, []byte(known.String()), 0o644); err != nil {
		return err
	}
	return c.writeFile(sshConfigFile, []byte(fmt.Sprintf(sshConfig, c.cfg.Port, c.path(clientKey), c.path(knownHosts))), 0o644)
}

// hostsText is the hosts file: localhost, then ADDR NAME for every host.
func hostsText(hosts []Host) []byte {
	names := make([]lab.HostName, len(hosts))
	for i, h := range hosts {
		names[i] = lab.HostName{Name: h.Name, Addr: h.Addr}
	}
	return lab.HostsText("# written by package cluster\n", names)
}

// knownHostsLine names h's key under its name and its address, with the
// port in brackets unless it is 22.
func knownHostsLine(h Host, port int, key ssh.PublicKey) string {
	names := []string{h.Name, h.Addr.String()}
	if port != 22 {
		for i, n := range names {
			names[i] = "[" + n + "]:" + strconv.Itoa(port)
		}
	}
	return strings.Join(names, ",") + " " + string(ssh.MarshalAuthorizedKey(key))
}

func hostPort(a netip.Addr, port int) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}

func writeKey(path string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	blk, err := ssh.MarshalPrivateKey(priv, "cluster")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(pub)
}

// startSSHDs starts every host's sshd (in the foreground, logging to a
// file of the scratch directory) and waits until each accepts
// connections on its address.
func (c *Cluster) startSSHDs(ctx context.Context) error {
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if sshd, err = exec.LookPath("/usr/sbin/sshd"); err != nil {
			return &MissingError{What: "sshd", Package: "openssh-server"}
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // its privilege separation directory
		return err
	}
	for _, h := range c.cfg.Hosts {
		logf, err := os.Create(c.SSHDLog(h.Name))
		if err != nil {
			return err
		}
		cmd, err := c.Command(context.Background(), h.Name, sshd, "-D", "-e", "-f", c.path("sshd_config_"+h.Name))
		if err != nil {
			logf.Close()
			return err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return fmt.Errorf("start sshd on %s: %w", h.Name, err)
		}
		c.sshds = append(c.sshds, cmd)
	}
	for _, h := range c.cfg.Hosts {
		if err := waitListening(ctx, h, hostPort(h.Addr, c.cfg.Port), 10*time.Second); err != nil {
			log, _ := os.ReadFile(c.SSHDLog(h.Name))
			return fmt.Errorf("sshd on %s: %w\n%s", h.Name, err, log)
		}
	}
	return nil
}

// SSHDLog is the log file of host name's sshd.
func (c *Cluster) SSHDLog(name string) string {
	return filepath.Join(c.cfg.Dir, "sshd-"+name+".log")
}

// waitListening waits until something accepts TCP connections at addr,
// dialled from inside h's own namespace.
func waitListening(ctx context.Context, h Host, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := netns.Do(h.NS, func() error {
			conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				conn.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens at %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MissingError is a program the cluster needs that is not installed.
type MissingError struct {
	What    string // the program
	Package string // the Debian package that has it
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("cluster: %s is not installed (Debian package %s; cluster.Install installs it)", e.What, e.Package)
}
