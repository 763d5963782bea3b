package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

// testNet is an exit's network in tests: no packet leaves this host.
// Names it knows resolve as it says (others as the host resolves them);
// an address with a stand-in is connected to the stand-in, a loopback
// listener, after the exit's Control hook saw the address (or the one
// connectsTo names instead: a socket that connects elsewhere than
// asked); loopback and this host's own addresses are dialled as they
// are; anything else has no route.
type testNet struct {
	names      map[string][]netip.Addr
	standIn    map[netip.AddrPort]string
	connectsTo map[netip.AddrPort]string
	own        hostAddrs
}

func (n *testNet) exitNet() *exitNet {
	return &exitNet{
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if a, ok := n.names[host]; ok {
				return a, nil
			}
			return hostNet.lookup(ctx, host)
		},
		dial: func(ctx context.Context, to netip.AddrPort, ctl func(string, string, syscall.RawConn) error) (net.Conn, error) {
			if s, ok := n.standIn[to]; ok {
				at := to.String()
				if c, ok := n.connectsTo[to]; ok {
					at = c
				}
				if err := ctl("tcp", at, nil); err != nil {
					return nil, err
				}
				var d net.Dialer
				return d.DialContext(ctx, "tcp", s)
			}
			if _, own := n.own.own[to.Addr()]; to.Addr().IsLoopback() || own {
				return hostNet.dial(ctx, to, ctl)
			}
			return nil, fmt.Errorf("test network: no route to %s (tests send only to loopback)", to)
		},
	}
}

// exitFixture is a grid of a hub, an exit node ("exitnode") and a
// member's agent ("alpha", run with alice's proxy), on loopback.
type exitFixture struct {
	member  *control.Client
	subject string // the member's certificate's subject
	exit    *Agent
	log     *testwait.Log // the exit's
}

func startExit(t *testing.T, cfg Config, n *testNet) *exitFixture {
	t.Helper()
	g := pkitest.New(t, "testgrid")
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: g.Member(t, ca.Hub, "site"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go h.Serve(ctx)
	hubs := []string{h.Addr().String()}
	f := &exitFixture{log: &testwait.Log{}}
	own, err := readHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	n.own = own
	cfg.AllowExit, cfg.exitNet = true, n.exitNet()
	cfg.Control = fmt.Sprintf("@gridlink-test-%d-%s-exit", os.Getpid(), t.Name())
	cfg.Node = vconn.Config{Name: "exitnode", Creds: g.Member(t, ca.Node, "exitnode"), Hubs: hubs, ListenAddr: "127.0.0.1", Logf: f.log.Logf,
		Hide: []netip.Prefix{netip.MustParsePrefix("100.96.0.0/12"), netip.MustParsePrefix("fd67:726c::/32")}}
	if f.exit, err = Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.exit.Close() })
	creds := g.Proxy(t, g.User(t, "alice", "physics"), proxy.Options{})
	self, err := creds.Self()
	if err != nil {
		t.Fatal(err)
	}
	f.subject = self.Owner()
	sock := fmt.Sprintf("@gridlink-test-%d-%s-alpha", os.Getpid(), t.Name())
	a, err := Start(context.Background(), Config{Control: sock, Node: vconn.Config{Name: "alpha", Creds: creds, Hubs: hubs, ListenAddr: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f.member = control.Dial(sock)
	return f
}

// refused asks the exit for target and checks that the member is told
// "exit node exitnode refuses TARGET: WHY" with the words want, and that
// the exit's log says the same with the member's subject.
func (f *exitFixture) refused(t *testing.T, target, want string) {
	t.Helper()
	f.refusedAs(t, target, target, want)
}

// refusedAs is refused, of a target the exit shows as shown.
func (f *exitFixture) refusedAs(t *testing.T, target, shown, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.member.Connect(ctx, control.ConnectRequest{Addr: target, Exit: "exitnode"})
	if err == nil {
		c.Close()
		t.Errorf("%s through the exit: connected, want refused (%s)", target, want)
		return
	}
	msg := "exit node exitnode refuses " + shown + ": " + want
	if se, ok := err.(*control.StreamError); !ok || se.Kind != control.KindNotAllowed || !strings.Contains(se.Msg, msg) {
		t.Errorf("%s through the exit: %v (%T), want kind %s saying %q", target, err, err, control.KindNotAllowed, msg)
		return
	}
	f.log.Line(t, fmt.Sprintf("exit refused %q", f.subject), msg)
}

// through opens an exit to target, sends "x", and checks the SHA-256
// answer of the hash server behind it.
func (f *exitFixture) through(t *testing.T, target string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := f.member.Connect(ctx, control.ConnectRequest{Addr: target, Exit: "exitnode"})
	if err != nil {
		t.Fatalf("%s through the exit: %v", target, err)
	}
	c.Write([]byte("x"))
	c.(interface{ CloseWrite() error }).CloseWrite()
	got, _ := io.ReadAll(c)
	c.Close()
	if want := sha256.Sum256([]byte("x")); string(got) != string(want[:]) {
		t.Fatalf("%s through the exit: answer %x", target, got)
	}
}

// refusals are the exit's refusal counts by reason.
func refusals(a *Agent) map[string]uint64 {
	m := map[string]uint64{}
	for _, r := range a.ExitCounters().Refused {
		m[r.Reason] = r.Count
	}
	return m
}

// ownAddr is an address of one of this host's interfaces other than
// loopback; the test skips when there is none.
func ownAddr(t *testing.T) (netip.Addr, string) {
	t.Helper()
	h, err := readHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for a, ifc := range h.own {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() && a.Is4() {
			return a, ifc
		}
	}
	for a, ifc := range h.own {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			return a, ifc
		}
	}
	t.Skip("this host has no address but loopback and link-local ones")
	return netip.Addr{}, ""
}

// The exit refuses the exit host's own services and the private networks
// it was not told to open, each with its reason on both ends, and
// counts each refusal by its reason.
func TestExitRefuses(t *testing.T) {
	metricsLike := hashServer(t) // a loopback-only service of the exit host
	port := metricsLike[strings.LastIndexByte(metricsLike, ':')+1:]
	own, ifc := ownAddr(t)
	ownL, err := net.Listen("tcp", netip.AddrPortFrom(own, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ownL.Close()
	ownTarget := ownL.Addr().String()
	n := &testNet{
		names: map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("127.0.0.1")}},
		// the socket of this public address would connect to loopback
		standIn:    map[netip.AddrPort]string{netip.MustParseAddrPort("203.0.113.10:" + port): metricsLike},
		connectsTo: map[netip.AddrPort]string{netip.MustParseAddrPort("203.0.113.10:" + port): metricsLike},
	}
	// the own address is listed, to show that a listing opens no own address
	f := startExit(t, Config{ExitAllow: []ExitRule{
		{Prefix: netip.PrefixFrom(own, own.BitLen())},
		{Prefix: netip.MustParsePrefix("192.168.7.0/24"), Ports: []PortRange{{22, 22}, {8000, 9000}}},
	}}, n)
	for _, c := range []struct{ target, want, reason string }{
		{metricsLike, "loopback of the exit host", status.ExitRefusedLoopback},
		{"[::ffff:127.0.0.1]:" + port, "loopback of the exit host", status.ExitRefusedLoopback},
		{"[::1]:" + port, "loopback of the exit host", status.ExitRefusedLoopback},
		{"localhost:" + port, "localhost resolves to", status.ExitRefusedLoopback},
		{"rebind.test:" + port, "rebind.test resolves to 127.0.0.1, loopback of the exit host", status.ExitRefusedLoopback},
		{"203.0.113.10:" + port, "connecting to " + metricsLike + ": loopback of the exit host", status.ExitRefusedLoopback},
		{"169.254.169.254:80", "a link-local address", status.ExitRefusedLinkLocal},
		{"[fe80::1]:80", "a link-local address", status.ExitRefusedLinkLocal},
		{"[::ffff:169.254.169.254]:80", "a link-local address", status.ExitRefusedLinkLocal},
		{"0.0.0.0:" + port, "an unspecified address (the exit host itself)", status.ExitRefusedUnspecified},
		{"[::]:" + port, "an unspecified address (the exit host itself)", status.ExitRefusedUnspecified},
		{"224.0.0.1:80", "a multicast address", status.ExitRefusedMulticast},
		{"[ff02::1]:80", "a multicast address", status.ExitRefusedMulticast},
		{"255.255.255.255:80", "a broadcast address", status.ExitRefusedBroadcast},
		{ownTarget, "an address of the exit host (" + ifc + ")", status.ExitRefusedOwnAddress},
		{"10.1.2.3:22", "a private address (10.0.0.0/8) that the exit's --exit-allow does not list", status.ExitRefusedPrivate},
		{"172.20.0.1:443", "a private address (172.16.0.0/12) that the exit's --exit-allow does not list", status.ExitRefusedPrivate},
		{"100.64.0.1:80", "a private address (100.64.0.0/10) that the exit's --exit-allow does not list", status.ExitRefusedPrivate},
		{"[fd12::1]:80", "a private address (fc00::/7) that the exit's --exit-allow does not list", status.ExitRefusedPrivate},
		{"[::ffff:10.1.2.3]:22", "a private address (10.0.0.0/8)", status.ExitRefusedPrivate},
		{"[64:ff9b::a01:203]:22", "the NAT64 form of 10.1.2.3, a private address (10.0.0.0/8)", status.ExitRefusedPrivate},
		{"100.100.0.1:22", "an address of the grid's virtual network 100.96.0.0/12", status.ExitRefusedPrivate},
		{"192.168.7.5:23", "a private address (192.168.0.0/16) on port 23, where the exit's --exit-allow lists only port 22,8000-9000", status.ExitRefusedPort},
		// what the member asks is shown quoted when it is no HOST:PORT:
		// the exit's log shows what was asked, and only that
		{"example.test:0", "not HOST:PORT", status.ExitRefusedBadRequest},
		{"evil\nexit for x:22", "not HOST:PORT", status.ExitRefusedBadRequest},
		{"[fd00::1%eth0]:22", "not HOST:PORT: a host name or an IP address without a zone, and a port 1-65535", status.ExitRefusedBadRequest},
		{"a..b:22", "not HOST:PORT", status.ExitRefusedBadRequest},
	} {
		before := refusals(f.exit)[c.reason]
		shown := c.target
		if c.reason == status.ExitRefusedBadRequest {
			shown = strconv.Quote(c.target)
		}
		f.refusedAs(t, c.target, shown, c.want)
		if got := refusals(f.exit)[c.reason]; got != before+1 {
			t.Errorf("%s: %s refusals %d, want %d", c.target, c.reason, got, before+1)
		}
	}
	if c := f.exit.ExitCounters(); c.Opened != 0 {
		t.Errorf("%d exits opened, want none: %+v", c.Opened, c)
	}
}

// A private address --exit-allow lists is reached on its ports; the exit
// logs the exit (member, destination as asked and as dialled, bytes each
// way, how it ended) and counts it.
func TestExitAllowedLoggedAndCounted(t *testing.T) {
	hash := hashServer(t)
	n := &testNet{
		names:   map[string][]netip.Addr{"db.site.test": {netip.MustParseAddr("192.168.7.5")}},
		standIn: map[netip.AddrPort]string{netip.MustParseAddrPort("192.168.7.5:8443"): hash, netip.MustParseAddrPort("192.168.7.5:22"): hash},
	}
	f := startExit(t, Config{ExitAllow: []ExitRule{{Prefix: netip.MustParsePrefix("192.168.7.0/24"), Ports: []PortRange{{22, 22}, {8000, 9000}}}}}, n)
	f.through(t, "db.site.test:8443")
	f.through(t, "192.168.7.5:22")
	who := fmt.Sprintf("exit for %q (alice (user proxy, ", f.subject)
	f.log.Line(t, who, ": db.site.test:8443 (dialled 192.168.7.5:8443) opened")
	f.log.Line(t, who, ": db.site.test:8443 (dialled 192.168.7.5:8443) ended after ", ", 1 bytes sent, 32 received: closed")
	f.log.Line(t, who, ": 192.168.7.5:22 (dialled 192.168.7.5:22) ended after ", ", 1 bytes sent, 32 received: closed")
	c := f.exit.ExitCounters()
	if c.Opened != 2 || c.SentBytes != 2 || c.ReceivedBytes != 64 || c.Failed != 0 {
		t.Errorf("exit counters %+v, want 2 opened, 2 bytes sent, 64 received", c)
	}
}

// A member has at most ExitPerMember exits open at once; the next is
// refused, saying so on both ends, until one ends.
func TestExitPerMember(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(hold) }) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-hold; c.Close() }()
		}
	}()
	to := netip.MustParseAddrPort("192.168.7.5:22")
	f := startExit(t, Config{ExitPerMember: 2, ExitAllow: []ExitRule{{Prefix: netip.MustParsePrefix("192.168.7.0/24")}}},
		&testNet{standIn: map[netip.AddrPort]string{to: l.Addr().String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var open []net.Conn
	for range 2 {
		c, err := f.member.Connect(ctx, control.ConnectRequest{Addr: to.String(), Exit: "exitnode"})
		if err != nil {
			t.Fatalf("exit %d of 2: %v", len(open)+1, err)
		}
		open = append(open, c)
	}
	f.refused(t, to.String(), fmt.Sprintf("%s has 2 exits open at once here, the most the exit allows (--exit-per-member)", f.subject))
	if got := refusals(f.exit)[status.ExitRefusedPerMember]; got != 1 {
		t.Errorf("%d per-member refusals, want 1", got)
	}
	open[0].Close()
	once.Do(func() { close(hold) })
	f.log.Line(t, " ended after ")
	c, err := f.member.Connect(ctx, control.ConnectRequest{Addr: to.String(), Exit: "exitnode"})
	if err != nil {
		t.Fatalf("an exit after the others ended: %v", err)
	}
	c.Close()
	open[1].Close()
}

// --exit-allow's text form: strict, its errors in words.
func TestParseExitRule(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":                  "10.0.0.0/8",
		"192.168.1.5/32:22":           "192.168.1.5/32:22",
		"172.16.0.0/12:80,443":        "172.16.0.0/12:80,443",
		"fd00::/8:8000-9000,22":       "fd00::/8:8000-9000,22",
		"::ffff:10.1.0.0/112:22":      "10.1.0.0/16:22",
		"0.0.0.0/0:443":               "0.0.0.0/0:443",
		"100.96.0.0/12":               "100.96.0.0/12",
		"192.168.0.0/16:1-65535":      "192.168.0.0/16:1-65535",
		"fd67:726c::/32:5201,5202,22": "fd67:726c::/32:5201,5202,22",
	} {
		r, err := ParseExitRule(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseExitRule(%q) = %v, %v, want %s", in, r, err, want)
		}
	}
	for in, want := range map[string]string{
		"10.0.0.5":             "want CIDR[:PORTS]",
		"10.0.0.5:22":          "want CIDR[:PORTS]",
		"10.0.0.0/33":          `"10.0.0.0/33" is not a CIDR prefix`,
		"10.1.2.3/8":           "has address bits set past /8: did you mean 10.0.0.0/8?",
		"127.0.0.0/8":          "127.0.0.0/8 is loopback of the exit host, which an exit refuses whatever --exit-allow lists",
		"127.0.0.1/32:9100":    "loopback of the exit host, which an exit refuses",
		"::1/128":              "loopback",
		"169.254.0.0/16":       "a link-local address, which an exit refuses",
		"fe80::/64":            "a link-local address",
		"224.0.0.0/8":          "a multicast address",
		"8.8.8.8/32:53":        "8.8.8.8/32 holds no private address",
		"10.0.0.0/8:":          `port "" is not a port`,
		"10.0.0.0/8:0":         `port "0" is not a port`,
		"10.0.0.0/8:65536":     `port "65536" is not a port`,
		"10.0.0.0/8:022":       `port "022" is not a port`,
		"10.0.0.0/8:22,,80":    `port "" is not a port`,
		"10.0.0.0/8:+22":       `port "+22" is not a port`,
		"10.0.0.0/8:9000-8000": `port range "9000-8000" ends below its start`,
		"10.0.0.0/8:1-2-3":     `port "1-2-3" is not a port`,
		"10.0.0.0/8:ssh":       `port "ssh" is not a port`,
	} {
		_, err := ParseExitRule(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseExitRule(%q): %v, want an error naming it and saying %q", in, err, want)
		}
	}
}

// The Control hook refuses what the socket would connect to, with the
// host's own dialer: a loopback listener is never reached.
func TestExitControlHook(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hosts, err := readHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var p exitPolicy
	c, err := hostNet.dial(context.Background(), netip.MustParseAddrPort(l.Addr().String()), p.control(hosts))
	var r *exitRefusal
	if !errors.As(err, &r) || r.reason != status.ExitRefusedLoopback || !strings.Contains(r.words, "connecting to "+l.Addr().String()+": loopback of the exit host") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial of a loopback listener with the exit's Control hook: %v", err)
	}
}

// parseTarget reads what a member sends (the exit request's HOST:PORT):
// what it takes joins back to the same text and holds nothing but a
// host name's or an IP address's characters, so that the exit's log
// lines show it as it is.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.org:443", "10.1.2.3:22", "[::1]:80", "[fe80::1%eth0]:22", "a..b:1", "-x:1",
		"evil\nexit for x:22", "host.:80", "x:0", "x:65536", "x:022", ":80", "[::ffff:127.0.0.1]:9100", "a_b-c.d:8000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, ok := parseTarget(s)
		if !ok {
			return
		}
		if j := net.JoinHostPort(host, strconv.Itoa(int(port))); j != s {
			t.Fatalf("parseTarget(%q) = %q, %d: joins to %q", s, host, port, j)
		}
		if strings.IndexFunc(host, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r))
		}) >= 0 {
			t.Fatalf("parseTarget(%q) took host %q", s, host)
		}
	})
}
