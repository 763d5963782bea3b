package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
)

// labHost is a grid6 host as seen from Go: its namespace, and sockets and
// interface lists made inside it.
type labHost struct {
	t  *testing.T
	h  *topology.Host
	ns string
}

func hostOf(t *testing.T, topo *topology.Topology, name string) *labHost {
	h := labtest.Host(t, topo, name)
	return &labHost{t: t, h: h, ns: lab.HostNS(h)}
}

// dial makes TCP connections from inside the host.
func (h *labHost) dial(ctx context.Context, network, addr string) (c net.Conn, err error) {
	err = netns.Do(h.ns, func() (e error) {
		var d net.Dialer
		c, e = d.DialContext(ctx, network, addr)
		return e
	})
	return c, err
}

// local returns the host's interface prefixes.
func (h *labHost) local() []netip.Prefix {
	h.t.Helper()
	var ps []netip.Prefix
	if err := netns.Do(h.ns, func() (err error) { ps, err = LocalPrefixes(); return err }); err != nil {
		h.t.Fatal(err)
	}
	return ps
}

// listen opens a direct listener inside the host.
func (h *labHost) listen(cfg ListenConfig) *Listener {
	h.t.Helper()
	local := h.local()
	cfg.Local = func() []netip.Prefix { return local }
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	var l *Listener
	if err := netns.Do(h.ns, func() (err error) { l, err = Listen(context.Background(), cfg); return err }); err != nil {
		h.t.Fatalf("listen on %s: %v", h.h.ID(), err)
	}
	h.t.Cleanup(func() { l.Close() })
	return l
}

// dialer returns a Dialer whose sockets are made inside the host.
func (h *labHost) dialer(creds *pki.Credentials) *Dialer {
	local := h.local()
	return &Dialer{Creds: creds, DialContext: h.dial, Local: func() []netip.Prefix { return local }}
}

func ap(s string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(s), port)
}

// One lab for all: bringing grid6 up is the slow part.
func TestGrid6(t *testing.T) {
	topo := labtest.Up(t, "grid6", nil)
	t.Run("WrongMachine", func(t *testing.T) { testWrongMachine(t, topo) })
	t.Run("SSH", func(t *testing.T) { testSSH(t, topo) })
}

// Round trips are counted on the paper's own delays (factor 1), where the
// handshakes' CPU time (a few ms under -race) is small beside them.
func TestGrid6PaperDelays(t *testing.T) {
	topo := labtest.Up(t, "grid6", map[string]string{"factor": "1.0"})
	testRoundTrips(t, topo)
}

// das3v and das3d both use 10.1.0.0/24: das3v-n2's private address,
// dialled from das3d-n1, reaches das3d-n2. The identity check catches it
// and the public address wins.
func testWrongMachine(t *testing.T, topo *topology.Topology) {
	v2, d2, d1 := hostOf(t, topo, "das3v-n2"), hostOf(t, topo, "das3d-n2"), hostOf(t, topo, "das3d-n1")
	kv, kd, kc := testCreds(t, 10), testCreds(t, 11), testCreds(t, 12)
	lv := v2.listen(ListenConfig{Creds: kv, Ports: PortRange{7100, 7199}})
	port := lv.Port()
	ld := d2.listen(ListenConfig{Creds: kd, Ports: PortRange{port, port}}) // same port, another machine
	go echo(lv)
	go echo(ld)

	mv := lv.Machine(kv.Key.ID(), "das3v-n2")
	pub, priv := ap("198.51.100.12", port), ap("10.1.0.12", port)
	if !slices.Contains(mv.Addrs, pub) || !slices.Contains(mv.Addrs, priv) || !slices.Contains(mv.Addrs, ap("10.2.0.12", port)) {
		t.Fatalf("das3v-n2's machine identifier %v", mv.Addrs)
	}
	d := d1.dialer(kc)
	d.Stagger = 2 * time.Second // so only the detected wrong machine can start the next attempt early
	if got := Order(d.Local(), nil, mv.Addrs); len(got) != 3 || got[0] != priv || got[1] != pub {
		t.Fatalf("order from das3d-n1: %v; want the shared private network first, then public", got)
	}
	start := time.Now()
	c, err := d.Dial(context.Background(), mv, "echo")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	t.Logf("das3d-n1 -> das3v-n2 in %v: %v", took, c.Attempts)
	if c.Via != pub.String() || c.Peer != kv.Key.ID() {
		t.Errorf("won via %s peer %s; want %s", c.Via, c.Peer.Short(), pub)
	}
	var pe *pki.PeerError
	if len(c.Attempts) != 2 || c.Attempts[0].Via != priv.String() || !errors.As(c.Attempts[0].Err, &pe) || pe.Got != kd.Key.ID() {
		t.Errorf("trace %v: want %s to reach das3d-n2 (%s) first", c.Attempts, priv, kd.Key.ID().Short())
	}
	if took > time.Second {
		t.Errorf("took %v: the public address waited for the stagger", took)
	}
	// das3d-n2 saw a dialler that walked away.
	testwait.Until(t, "das3d-n2 counts the aborted handshake", 5*time.Second, func() bool { return ld.Stats().Failed == 1 })
	if st := ld.Stats(); st.Accepted != 0 {
		t.Errorf("das3d-n2 stats %+v", st)
	}
	// A non-routed g5k node has no route to any of them, and says so.
	g := hostOf(t, topo, "g5k-n1").dialer(kc)
	_, err = g.Dial(context.Background(), mv, "echo")
	if strings.Count(fmt.Sprint(err), "tcp connect: network is unreachable") != 3 {
		t.Errorf("from a non-routed node: %v", err)
	}
	t.Logf("from g5k-n1: %v", err)
	// With the private address only, the error says what happened.
	_, err = d.Dial(context.Background(), identity.Machine{ID: kv.Key.ID(), Name: "das3v-n2", Addrs: []netip.AddrPort{priv}}, "echo")
	if !errors.Is(err, pki.ErrWrongPeer) || !strings.Contains(err.Error(), priv.String()+": reached the wrong machine: expected "+kv.Key.ID().Short()+", found "+kd.Key.ID().Short()) {
		t.Errorf("private address only: %v", err)
	}
}

// Setup costs across the rockstar-das3v link: a direct connection takes
// two round trips (TCP, then TLS with the identity check and the request),
// as in the paper; a refusal is known after the same two, and its reason
// one later.
func testRoundTrips(t *testing.T, topo *topology.Topology) {
	v2, r1 := hostOf(t, topo, "das3v-n2"), hostOf(t, topo, "rockstar-n1")
	kv, kr := testCreds(t, 13), testCreds(t, 14)
	l := v2.listen(ListenConfig{Creds: kv, Check: func(_ identity.ID, req string) error {
		if req != "open" {
			return errors.New("port " + req + " is closed")
		}
		return nil
	}})
	go echo(l)
	rtt := 2 * topo.LinkFor("rockstar", "das3v").Delay
	target := l.Machine(kv.Key.ID(), "das3v-n2")
	d := r1.dialer(kr)
	best := func(f func() error) time.Duration {
		bestT := time.Hour
		for i := 0; i < 5; i++ {
			start := time.Now()
			if err := f(); err != nil {
				t.Fatal(err)
			}
			bestT = min(bestT, time.Since(start))
		}
		return bestT
	}
	tcp := best(func() error {
		c, err := labtest.Dial(r1.h, ap("198.51.100.12", l.Port()).String(), "", 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	accepted := best(func() error {
		c, err := d.Dial(context.Background(), target, "open")
		if err == nil {
			c.Close()
		}
		return err
	})
	refused := best(func() error {
		_, err := d.Dial(context.Background(), target, "ssh")
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "port ssh is closed") {
			return fmt.Errorf("want a refusal, got %v", err)
		}
		return nil
	})
	r := func(d time.Duration) string {
		return fmt.Sprintf("%v (%.2f RTT)", d.Round(10*time.Microsecond), float64(d)/float64(rtt))
	}
	t.Logf("rockstar-n1 -> das3v-n2, RTT %v: TCP connect %s; direct dial %s; refused with reason %s", rtt, r(tcp), r(accepted), r(refused))
	// Correctness, not speed: no extra round trip on the accepted path.
	if accepted < 2*rtt || accepted > 2*rtt+rtt/2 {
		t.Errorf("direct dial took %s: want two round trips", r(accepted))
	}
}

// SSH tunnels through hiroshi, whose firewall lets only tcp/22 in
// (forwarded to its frontend) and out.
func testSSH(t *testing.T, topo *topology.Topology) {
	fe, v1 := hostOf(t, topo, "hiroshi-fe"), hostOf(t, topo, "das3v-n1")
	clientKey, known := feSSHD(t, fe)
	kh, kc := testCreds(t, 20), testCreds(t, 21)
	l := fe.listen(ListenConfig{Creds: kh, Check: func(_ identity.ID, req string) error {
		if req != "hub" {
			return errors.New("only hub links here")
		}
		return nil
	}})
	accepted := make(chan *Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte("Host hiroshi\n  HostName 198.51.100.129\n  User root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := v1.dialer(kc)
	d.SSH = &SSHConfig{ConfigFile: config, KnownHosts: known, IdentityFiles: []string{clientKey}}
	ctx := context.Background()

	for _, spec := range []string{
		fmt.Sprintf("ssh://root@198.51.100.129/127.0.0.1:%d", l.Port()),
		fmt.Sprintf("ssh://hiroshi/%d", l.Port()),
	} {
		start := time.Now()
		raw, err := d.Transport(ctx, spec)
		if err != nil {
			t.Fatalf("Transport %s: %v", spec, err)
		}
		c, err := d.Handshake(ctx, raw, kh.Key.ID(), "hub")
		if err != nil {
			t.Fatalf("identity check over %s: %v", spec, err)
		}
		roundTrip(t, c)
		t.Logf("das3v-n1 -> hiroshi-fe through %s: tunnel and handshake in %v", spec, time.Since(start).Round(time.Millisecond))
		c.Close()
		select {
		case s := <-accepted:
			if s.Peer != kc.Key.ID() || s.Request != "hub" {
				t.Errorf("hiroshi-fe accepted peer %s request %q", s.Peer.Short(), s.Request)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("hiroshi-fe accepted nothing")
		}
	}
	// Unknown host key: a clear error naming the host and the file.
	empty := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d2 := v1.dialer(kc)
	d2.SSH = &SSHConfig{ConfigFile: config, KnownHosts: empty, IdentityFiles: []string{clientKey}}
	_, err := d2.Transport(ctx, fmt.Sprintf("ssh://hiroshi/%d", l.Port()))
	if err == nil || !strings.Contains(err.Error(), "ssh hiroshi (198.51.100.129:22): unknown host") || !strings.Contains(err.Error(), "is not in "+empty) {
		t.Errorf("unknown host key: %v", err)
	}
	t.Logf("unknown host: %v", err)

	// Dial: the direct address is firewalled; with ssh configured the
	// tunnel through port 22 of the same address wins (SmartSockets §3.2.4).
	target := identity.Machine{ID: kh.Key.ID(), Name: "hiroshi-fe", Addrs: []netip.AddrPort{ap("198.51.100.129", l.Port())}}
	plain := v1.dialer(kc)
	plain.Timeout = 300 * time.Millisecond
	// the firewall drops the SYN: a time-out, whichever timer (the attempt's
	// or the context's) fires first on a loaded machine.
	if _, err := plain.Dial(ctx, target, "hub"); err == nil || !(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "i/o timeout")) {
		t.Errorf("direct to firewalled hiroshi: %v, want a time-out", err)
	}
	d.SSH.User = "root"
	c, err := d.Dial(ctx, target, "hub")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	want := fmt.Sprintf("ssh://198.51.100.129:22/127.0.0.1:%d", l.Port())
	if c.Via != want || len(c.Attempts) != 2 || !errors.Is(c.Attempts[0].Err, errLost) {
		t.Errorf("won via %s, attempts %v; want %s", c.Via, c.Attempts, want)
	}
	t.Logf("Dial with ssh fallback: %v", c.Attempts)
}

// feSSHD returns the client key and known_hosts file for the sshd on
// hiroshi's frontend: the lab's own when the topology runs one there
// (services=sshd), else one started for the test.
func feSSHD(t *testing.T, fe *labHost) (clientKey, knownHosts string) {
	if fe.h.Runs("sshd") {
		t.Logf("using the lab's sshd on %s", fe.h.ID())
		return lab.SSHClientKey(), lab.SSHKnownHosts()
	}
	sshd := startSSHD(t, fe.ns, "0.0.0.0", 22, func(addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return fe.dial(ctx, "tcp4", addr)
	})
	return sshd.clientKey, sshd.knownHosts(t, sshd.hostKey, "198.51.100.129:22")
}
