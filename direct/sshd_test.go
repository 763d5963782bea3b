package direct

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/testwait"
)

const sshdPath = "/usr/sbin/sshd"

// testSSHD is a real OpenSSH server run for a test, with a generated host
// key and one authorized client key, in files of its own.
type testSSHD struct {
	dir       string
	hostKey   ssh.PublicKey
	clientKey string // path of the client's private key
	port      int
	log       *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeKey makes an Ed25519 key, writes the private half in OpenSSH format
// to path and returns the public half.
func writeKey(t testing.TB, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// startSSHD runs sshd on listen:port, inside the named lab namespace (""
// for this one, where listen must be a loopback address). It stops when
// the test ends. probe dials the sshd from where it can be reached. extra
// lines open its sshd_config, so they win over the defaults here (sshd
// keeps the first value of a keyword).
func startSSHD(t testing.TB, netns, listen string, port int, probe func(addr string) (net.Conn, error), extra ...string) *testSSHD {
	t.Helper()
	labtest.RequireRoot(t)
	if _, err := os.Stat(sshdPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: install the Debian package openssh-server", sshdPath)
		}
		t.Skipf("%s missing (Debian package openssh-server)", sshdPath)
	}
	// Privilege separation needs this directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &testSSHD{dir: t.TempDir(), port: port, log: &syncBuffer{}}
	s.hostKey = writeKey(t, filepath.Join(s.dir, "host_ed25519"))
	s.clientKey = filepath.Join(s.dir, "id_client")
	client := writeKey(t, s.clientKey)
	if err := os.WriteFile(filepath.Join(s.dir, "authorized_keys"), ssh.MarshalAuthorizedKey(client), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := strings.Join(append(extra, ""), "\n") + fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
LogLevel VERBOSE
`, port, listen, filepath.Join(s.dir, "host_ed25519"), filepath.Join(s.dir, "authorized_keys"))
	confPath := filepath.Join(s.dir, "sshd_config")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{sshdPath, "-D", "-e", "-f", confPath}
	if netns != "" {
		args = append([]string{"ip", "netns", "exec", netns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.log)
		}
	})
	// Wait for its banner.
	addr := net.JoinHostPort(listen, fmt.Sprint(port))
	if listen == "0.0.0.0" {
		addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	}
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("last probe of %s: %v", addr, err)
		}
	}()
	testwait.Until(t, "the sshd's banner at "+addr, 10*time.Second, func() bool {
		var c net.Conn
		c, err = probe(addr)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 4)
			_, err = c.Read(b)
			c.Close()
			if err == nil && string(b) == "SSH-" {
				return true
			}
		}
		select {
		case <-exited:
			t.Fatalf("sshd exited: %s", s.log)
		default:
		}
		return false
	})
	return s
}

// knownHosts writes a known_hosts file trusting the sshd's key for hosts
// ("ADDR:PORT" each) and returns its path.
func (s *testSSHD) knownHosts(t testing.TB, key ssh.PublicKey, hosts ...string) string {
	t.Helper()
	var lines []string
	for _, h := range hosts {
		lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(h)}, key))
	}
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SSH through a real sshd on loopback: Transport by address and by alias,
// the identity check over the tunnel, deadlines, and the host key errors.
func TestSSHTransportLoopback(t *testing.T) {
	port := freeRun(t, "127.0.0.7", 1)
	sshd := startSSHD(t, "", "127.0.0.7", port, func(addr string) (net.Conn, error) {
		return net.DialTimeout("tcp4", addr, time.Second)
	})
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.8", Check: func(_ identity.ID, req string) error {
		if req != "hub" {
			return fmt.Errorf("no service %q here", req)
		}
		return nil
	}})
	go echo(l)
	sshdAddr := fmt.Sprintf("127.0.0.7:%d", port)
	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("Host fe\n  HostName 127.0.0.7\n  Port %d\n  User root\nHost *\n  IdentityFile %s\n", port, sshd.clientKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &SSHConfig{ConfigFile: config, KnownHosts: sshd.knownHosts(t, sshd.hostKey, sshdAddr), IdentityFiles: []string{}}
	d := &Dialer{Creds: cli, SSH: cfg, Local: noLocal}
	ctx := context.Background()

	for _, spec := range []string{
		fmt.Sprintf("ssh://root@%s/127.0.0.8:%d", sshdAddr, l.Port()),
		fmt.Sprintf("ssh://fe/127.0.0.8:%d", l.Port()),
	} {
		raw, err := d.Transport(ctx, spec)
		if err != nil {
			t.Fatalf("Transport %s: %v", spec, err)
		}
		if !strings.HasPrefix(raw.RemoteAddr().String(), "ssh://") {
			t.Errorf("remote address %v", raw.RemoteAddr())
		}
		// Deadlines work through the tunnel.
		_ = raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := raw.Read(make([]byte, 1)); err == nil || !os.IsTimeout(err) {
			t.Errorf("read deadline through the tunnel: %v", err)
		}
		_ = raw.SetReadDeadline(time.Time{})
		c, err := d.Handshake(ctx, raw, srv.Key.ID(), "hub")
		if err != nil {
			t.Fatalf("handshake through %s: %v", spec, err)
		}
		roundTrip(t, c)
		c.Close()
	}
	// A refusal travels back through the tunnel too.
	raw, err := d.Transport(ctx, fmt.Sprintf("ssh://fe/127.0.0.8:%d", l.Port()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Handshake(ctx, raw, srv.Key.ID(), "web"); err == nil || !strings.Contains(err.Error(), `no service "web" here`) {
		t.Errorf("refusal through the tunnel: %v", err)
	}

	// Unknown host: the error names the host and the known_hosts file.
	empty := filepath.Join(dir, "known_hosts.empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kh := range []string{empty, filepath.Join(dir, "no_such_known_hosts")} {
		d2 := &Dialer{Creds: cli, SSH: &SSHConfig{ConfigFile: config, KnownHosts: kh, IdentityFiles: []string{}}}
		_, err = d2.Transport(ctx, "ssh://fe/1")
		if err == nil || !strings.Contains(err.Error(), "unknown host") || !strings.Contains(err.Error(), sshdAddr) || !strings.Contains(err.Error(), kh) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(sshd.hostKey)) {
			t.Errorf("unknown host key: %v", err)
		}
	}
	// Another key for this host: a mismatch, said loudly.
	other := writeKey(t, filepath.Join(dir, "other"))
	d2 := &Dialer{Creds: cli, SSH: &SSHConfig{ConfigFile: config, KnownHosts: sshd.knownHosts(t, other, sshdAddr), IdentityFiles: []string{}}}
	if _, err = d2.Transport(ctx, "ssh://fe/1"); err == nil || !strings.Contains(err.Error(), "HOST KEY MISMATCH") {
		t.Errorf("mismatched host key: %v", err)
	}
	// A key the sshd does not know.
	d2 = &Dialer{Creds: cli, SSH: &SSHConfig{ConfigFile: "-", KnownHosts: cfg.KnownHosts, IdentityFiles: []string{filepath.Join(dir, "other")}}}
	if _, err = d2.Transport(ctx, "ssh://root@"+sshdAddr+"/1"); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("unknown client key: %v", err)
	}
	// No key at all.
	d2.SSH.IdentityFiles = []string{filepath.Join(dir, "nope")}
	if _, err = d2.Transport(ctx, "ssh://root@"+sshdAddr+"/1"); err == nil || !strings.Contains(err.Error(), "no usable private key") {
		t.Errorf("no key: %v", err)
	}
	// Nothing listening behind the sshd.
	if _, err = d.Transport(ctx, fmt.Sprintf("ssh://fe/%d", closedPort(t, "127.0.0.1").Port())); err == nil || !strings.Contains(err.Error(), "channel to 127.0.0.1") {
		t.Errorf("closed target: %v", err)
	}
}

// OpenSSH leaves Nagle's algorithm on for a connection that only forwards,
// which costs a round trip whenever the far end answers in two small writes
// moments apart. The tunnel runs one command so that the sshd turns it off
// (its debug log says so), and reports Nagle where the sshd refuses
// sessions (MaxSessions 0: forwarding only), where the tunnel still works.
var inetdSock = regexp.MustCompile(`inetd sockets after dupping: (\d+)`)

func TestSSHTunnelNoDelay(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.8"})
	go echo(l)
	for _, tc := range []struct {
		name  string
		extra []string
		nagle bool
	}{
		{"sessions", []string{"LogLevel DEBUG3"}, false},
		{"forwarding only", []string{"LogLevel DEBUG3", "MaxSessions 0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freeRun(t, "127.0.0.7", 1)
			sshd := startSSHD(t, "", "127.0.0.7", port, func(addr string) (net.Conn, error) {
				return net.DialTimeout("tcp4", addr, time.Second)
			}, tc.extra...)
			sshdAddr := fmt.Sprintf("127.0.0.7:%d", port)
			d := &Dialer{Creds: cli, Local: noLocal, SSH: &SSHConfig{ConfigFile: "-", KnownHosts: sshd.knownHosts(t, sshd.hostKey, sshdAddr), IdentityFiles: []string{sshd.clientKey}}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			raw, err := d.Transport(ctx, fmt.Sprintf("ssh://root@%s/127.0.0.8:%d", sshdAddr, l.Port()))
			if err != nil {
				t.Fatal(err)
			}
			if got := Nagle(raw); got != tc.nagle {
				t.Errorf("Nagle = %v, want %v", got, tc.nagle)
			}
			c, err := d.Handshake(ctx, raw, srv.Key.ID(), "")
			if err != nil {
				t.Fatalf("handshake through the tunnel: %v", err)
			}
			roundTrip(t, c)
			c.Close()
			// At DEBUG3 the sshd names the client's socket and logs
			// set_nodelay's work on it once a session ran (it sets
			// TCP_NODELAY on the sockets it forwards to regardless).
			deadline := time.Now().Add(3 * time.Second)
			var sock string
			var set bool
			for {
				log := sshd.log.String()
				if m := inetdSock.FindAllStringSubmatch(log, -1); m != nil {
					sock = m[len(m)-1][1]
				}
				set = sock != "" && strings.Contains(log, "fd "+sock+" setting TCP_NODELAY")
				if set || time.Now().After(deadline) {
					break
				}
				// Real time: the sshd is another process; with Nagle on,
				// the 3 s pass to show the line never comes.
				time.Sleep(20 * time.Millisecond)
			}
			if sock == "" {
				t.Fatal("the sshd log names no client socket")
			}
			if set == tc.nagle {
				t.Errorf("sshd set TCP_NODELAY on the client's socket (fd %s): %v, want %v", sock, set, !tc.nagle)
			}
		})
	}
}
