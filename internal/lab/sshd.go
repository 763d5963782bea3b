package lab

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// SSHDir holds the lab's OpenSSH material: one host key for every lab
// sshd, one client key authorized on all of them, and a known_hosts file
// naming every address a lab sshd is reached at. Clients in the lab use
//
//	ssh -i SSHDir/id_ed25519 -o UserKnownHostsFile=SSHDir/known_hosts root@ADDR
func SSHDir() string { return filepath.Join(StateDir, "ssh") }

// SSHClientKey and SSHKnownHosts are the files lab ssh clients use.
func SSHClientKey() string  { return filepath.Join(SSHDir(), "id_ed25519") }
func SSHKnownHosts() string { return filepath.Join(SSHDir(), "known_hosts") }

const sshdConfig = `# written by gridlab
Port 22
ListenAddress 0.0.0.0
HostKey %[1]s/host_ed25519
AuthorizedKeysFile %[1]s/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
PidFile none
AllowTcpForwarding yes
`

// startSSHDs runs an OpenSSH server on every host whose topology asks for
// one.
func startSSHDs(t *topology.Topology) error {
	var hosts []*topology.Host
	for _, h := range t.Hosts() {
		if h.Runs("sshd") {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if sshd, err = exec.LookPath("/usr/sbin/sshd"); err != nil {
			return fmt.Errorf("topology %s runs sshd: apt-get install openssh-server (make deps does it)", t.Name)
		}
	}
	if err := writeSSHKeys(t, hosts); err != nil {
		return err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return err
	}
	for _, h := range hosts {
		logf, err := os.Create(filepath.Join(StateDir, "sshd-"+h.ID()+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command("ip", "netns", "exec", HostNS(h), sshd, "-D", "-e", "-f", filepath.Join(SSHDir(), "sshd_config"))
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return fmt.Errorf("start sshd on %s: %w", h.ID(), err)
		}
		go cmd.Wait() // reaped when down kills it
		if err := waitListening(h, "127.0.0.1:22", 5*time.Second); err != nil {
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("sshd on %s: %w\n%s", h.ID(), err, log)
		}
	}
	return nil
}

// waitListening waits until something accepts TCP connections at addr
// inside h.
func waitListening(h *topology.Host, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := netns.Do(HostNS(h), func() error {
			c, err := net.DialTimeout("tcp4", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens at %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeSSHKeys makes the lab's host and client keys, authorized_keys,
// known_hosts and sshd_config.
func writeSSHKeys(t *topology.Topology, hosts []*topology.Host) error {
	dir := SSHDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	hostPub, err := writeKey(filepath.Join(dir, "host_ed25519"))
	if err != nil {
		return err
	}
	clientPub, err := writeKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		return err
	}
	auth := ssh.MarshalAuthorizedKey(clientPub)
	if err := os.WriteFile(filepath.Join(dir, "id_ed25519.pub"), auth, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), auth, 0o600); err != nil {
		return err
	}
	var names []string
	for _, h := range hosts {
		for _, ifc := range h.Ifaces {
			names = append(names, ifc.Addr.String())
		}
		for _, f := range h.Site.Forwards {
			if f.Host == h && f.Proto == "tcp" && f.ToPort == 22 {
				if f.Port == 22 {
					names = append(names, h.Site.WAN.String())
				} else {
					names = append(names, fmt.Sprintf("[%s]:%d", h.Site.WAN, f.Port))
				}
			}
		}
	}
	known := strings.Join(names, ",") + " " + string(ssh.MarshalAuthorizedKey(hostPub))
	if err := os.WriteFile(SSHKnownHosts(), []byte(known), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(fmt.Sprintf(sshdConfig, dir)), 0o600)
}

func writeKey(path string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	blk, err := ssh.MarshalPrivateKey(priv, "gridlab")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(pub)
}
