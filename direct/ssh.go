package direct

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHConfig says how to reach sshds (SmartSockets §3.2.4). Authentication
// is by key only; host keys must be in the known_hosts file. The zero
// value uses the user's ~/.ssh files.
type SSHConfig struct {
	ConfigFile    string   // default ~/.ssh/config ("-" for none)
	KnownHosts    string   // default ~/.ssh/known_hosts
	IdentityFiles []string // default ~/.ssh/id_ed25519, id_ecdsa, id_rsa; tried after the config file's IdentityFile
	User          string   // default: the config file's User, else the local user
	// Timeout bounds a tunnel's setup (connect, key exchange,
	// authentication, channel, and in Dial the TLS handshake): some ten
	// round trips; default 20s, where Dialer.Timeout bounds plain attempts.
	Timeout time.Duration
}

func (c *SSHConfig) timeout() time.Duration {
	if c != nil && c.Timeout > 0 {
		return c.Timeout
	}
	return 20 * time.Second
}

// hostKeyError is a host key that failed the known_hosts check; its text
// says it all.
type hostKeyError struct{ msg string }

func (e *hostKeyError) Error() string { return e.msg }

// sshTarget is everything needed to reach one sshd.
type sshTarget struct {
	alias    string // as written in the spec
	addr     string // HOSTNAME:PORT dialled and checked in known_hosts
	user     string
	identity []string
}

// resolve applies the spec, the ssh config file and the defaults.
func (c *SSHConfig) resolve(s transportSpec) (sshTarget, error) {
	home, _ := os.UserHomeDir()
	cfgPath := c.ConfigFile
	if cfgPath == "" {
		cfgPath = filepath.Join(home, ".ssh", "config")
	}
	var h sshHost
	if cfgPath != "-" {
		f, err := loadSSHConfig(cfgPath)
		if err == nil {
			h, err = f.lookup(s.host)
		}
		if err != nil {
			return sshTarget{}, err
		}
	}
	t := sshTarget{alias: s.host, user: s.user}
	hostname := s.host
	if h.hostName != "" {
		hostname = strings.ReplaceAll(h.hostName, "%h", s.host)
	}
	port := s.port
	if port == "" {
		port = h.port
	}
	if port == "" {
		port = "22"
	}
	if _, err := parsePort(port); err != nil {
		return sshTarget{}, fmt.Errorf("ssh %s: %w (from %s)", s.host, err, cfgPath)
	}
	t.addr = net.JoinHostPort(hostname, port)
	for _, u := range []string{h.user, c.User} {
		if t.user == "" {
			t.user = u
		}
	}
	local := ""
	if u, err := user.Current(); err == nil {
		local = u.Username
	} else {
		local = os.Getenv("USER")
	}
	if t.user == "" {
		t.user = local
	}
	if t.user == "" {
		return sshTarget{}, fmt.Errorf("ssh %s: no user name (set SSHConfig.User)", s.host)
	}
	expand := func(p string) string {
		r := strings.NewReplacer("%d", home, "%u", local, "%h", hostname, "%r", t.user, "%%", "%")
		p = r.Replace(p)
		if p == "~" || strings.HasPrefix(p, "~/") {
			p = filepath.Join(home, p[1:])
		}
		return p
	}
	ids := c.IdentityFiles
	if ids == nil {
		ids = []string{"~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"}
	}
	for _, p := range append(append([]string(nil), h.identityFiles...), ids...) {
		t.identity = append(t.identity, expand(p))
	}
	return t, nil
}

// signers loads the private keys that exist and are not encrypted.
func signers(paths []string) ([]ssh.Signer, error) {
	var out []ssh.Signer
	var notes []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			notes = append(notes, p+": no such file")
			continue
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			notes = append(notes, p+": encrypted (passphrases are not supported)")
		case err != nil:
			notes = append(notes, fmt.Sprintf("%s: %v", p, err))
		default:
			out = append(out, s)
		}
	}
	if len(out) == 0 && len(notes) == 0 {
		return nil, errors.New("no usable private key (no identity files configured)")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no usable private key (%s)", strings.Join(notes, "; "))
	}
	return out, nil
}

var probeKey = sync.OnceValue(func() ssh.PublicKey {
	pk, _ := ssh.NewPublicKey(ed25519.NewKeyFromSeed(make([]byte, 32)).Public())
	return pk
})

// hostKeyCheck returns the host key callback for addr from the known_hosts
// file and the algorithms of the keys known for it (so the sshd is asked
// for a key we can check, not one of another type).
func hostKeyCheck(path, alias, addr string) (ssh.HostKeyCallback, []string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return func(_ string, _ net.Addr, key ssh.PublicKey) error {
			return unknownHost(path, alias, addr, key)
		}, nil, nil
	}
	db, err := knownhosts.New(path)
	if err != nil {
		return nil, nil, fmt.Errorf("known_hosts %s: %w", path, err)
	}
	var algos []string
	var ke *knownhosts.KeyError
	if errors.As(db(addr, &net.TCPAddr{}, probeKey()), &ke) {
		for _, k := range ke.Want {
			switch t := k.Key.Type(); t {
			case ssh.KeyAlgoRSA:
				algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
			default:
				algos = append(algos, t)
			}
		}
	}
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := db(hostname, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return unknownHost(path, alias, addr, key)
		case errors.As(err, &ke):
			w := ke.Want[0]
			return &hostKeyError{fmt.Sprintf("ssh %s (%s): HOST KEY MISMATCH: it showed %s %s but %s:%d has another key; someone may be intercepting, or the host was reinstalled",
				alias, addr, key.Type(), ssh.FingerprintSHA256(key), w.Filename, w.Line)}
		case errors.As(err, &re):
			return &hostKeyError{fmt.Sprintf("ssh %s (%s): host key %s is revoked in %s:%d", alias, addr, ssh.FingerprintSHA256(key), re.Revoked.Filename, re.Revoked.Line)}
		}
		return err
	}
	return cb, algos, nil
}

func unknownHost(path, alias, addr string, key ssh.PublicKey) error {
	host, port, _ := net.SplitHostPort(addr)
	return &hostKeyError{fmt.Sprintf("ssh %s (%s): unknown host: its %s key %s is not in %s; check it and add it, e.g. ssh-keyscan -p %s %s >> %s",
		alias, addr, key.Type(), ssh.FingerprintSHA256(key), path, port, host, path)}
}

// sshTransport connects to the sshd of s and opens a direct-tcpip channel
// to s.target. The connection to the sshd lives as long as the channel.
func (d *Dialer) sshTransport(ctx context.Context, s transportSpec) (net.Conn, error) {
	cfg := d.SSH
	if cfg == nil {
		return nil, errors.New("ssh is not configured")
	}
	t, err := cfg.resolve(s)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("ssh %s@%s", t.user, t.addr)
	keys, err := signers(t.identity)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	known := cfg.KnownHosts
	if known == "" {
		home, _ := os.UserHomeDir()
		known = filepath.Join(home, ".ssh", "known_hosts")
	}
	check, algos, err := hostKeyCheck(known, s.host, t.addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	raw, err := d.dialTCP(ctx, t.addr)
	if err != nil {
		return nil, fmt.Errorf("%s: tcp connect: %w", where, bareError(err))
	}
	// ssh's handshake takes no context: closing the connection aborts it.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(quickAck(raw), t.addr, &ssh.ClientConfig{
		User:              t.user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(keys...)},
		HostKeyCallback:   check,
		HostKeyAlgorithms: algos,
	})
	if err != nil {
		stop()
		raw.Close()
		var hke *hostKeyError
		switch {
		case errors.As(err, &hke):
			return nil, hke // names the host already
		case ctx.Err() != nil:
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	client := ssh.NewClient(sc, chans, reqs)
	noDelay := make(chan bool, 1)
	go func() { noDelay <- sshdNoDelay(client) }()
	ch, err := client.DialContext(ctx, "tcp", s.target)
	nd := false
	if err == nil {
		nd = <-noDelay // one more round trip; ctx cuts it short (stop closes raw)
	}
	if !stop() || err != nil {
		client.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("%s: channel to %s: %w", where, s.target, err)
	}
	tn := newTunnel(ch, client, t.addr, s.target)
	tn.nagle = !nd
	return tn, nil
}

// sshdNoDelay asks the sshd to stop delaying small writes, and says
// whether it ran the command that does so. OpenSSH turns Nagle's algorithm
// off (TCP_NODELAY) on a connection only once one of its sessions executes
// a command (session.c: do_exec calls ssh_packet_set_interactive); a
// connection that only forwards keeps it on, and every small message the
// sshd sends within a round trip of the previous one then waits for that
// one's ACK: a whole round trip. So we run `true` once in a session (no
// pty: nothing is logged as a login) and close it. An sshd that refuses
// sessions, as a forwarding-only account may, leaves Nagle on; the tunnel
// still works, and Nagle reports it (hub links then coalesce small writes).
func sshdNoDelay(client *ssh.Client) bool {
	sess, err := client.NewSession()
	if err != nil {
		return false
	}
	if err := sess.Start("true"); err != nil {
		sess.Close()
		return false
	}
	go func() {
		_ = sess.Wait()
		sess.Close()
	}()
	return true
}

// Nagle reports whether c is an ssh tunnel whose sshd may hold a small
// write back until the previous one is acknowledged (see sshdNoDelay), so
// that its user had better coalesce small writes sent moments apart.
func Nagle(c net.Conn) bool {
	t, ok := c.(*tunnel)
	return ok && t.nagle
}

// tunnel is an ssh channel as a full net.Conn: the channel does not
// support deadlines, so the application talks to one end of a net.Pipe
// (which does) and two goroutines copy between the pipe and the channel.
// Closing the tunnel closes the ssh connection.
type tunnel struct {
	net.Conn // the application's end of the pipe
	client   *ssh.Client
	local    net.Addr
	remote   net.Addr
	nagle    bool // the sshd keeps Nagle's algorithm on (see sshdNoDelay)
	once     sync.Once
}

type tunnelAddr string

func (a tunnelAddr) Network() string { return "ssh" }
func (a tunnelAddr) String() string  { return string(a) }

func newTunnel(ch net.Conn, client *ssh.Client, sshd, target string) *tunnel {
	app, mine := net.Pipe()
	t := &tunnel{Conn: app, client: client, local: client.LocalAddr(), remote: tunnelAddr("ssh://" + sshd + "/" + target)}
	go func() { // application -> channel
		_, _ = io.Copy(ch, mine)
		_ = ch.Close()
	}()
	go func() { // channel -> application
		_, _ = io.Copy(mine, ch)
		_ = mine.Close()
	}()
	go func() { // the sshd went away
		_ = client.Wait()
		_ = mine.Close()
	}()
	return t
}

func (t *tunnel) LocalAddr() net.Addr  { return t.local }
func (t *tunnel) RemoteAddr() net.Addr { return t.remote }

func (t *tunnel) Close() error {
	err := t.Conn.Close()
	t.once.Do(func() { t.client.Close() })
	return err
}
