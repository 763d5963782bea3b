package direct

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/pki"
)

// The lab tests bring up grid6: the test binary doubles as its emulator.
func TestMain(m *testing.M) { labtest.Main(m) }

// testCreds makes credentials from a one-byte seed.
func testCreds(t testing.TB, seed byte) *pki.Credentials {
	t.Helper()
	s := make([]byte, 32)
	s[0] = seed
	c, err := pki.NewCredentials(identity.KeyFromSeed(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quiet is a logger that discards, for listeners that see failures on
// purpose.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testListen opens a listener on a loopback address (e.g. "127.0.0.2")
// that closes with the test.
func testListen(t testing.TB, cfg ListenConfig) *Listener {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	l, err := Listen(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// echo serves every accepted connection by echoing it, until l closes.
func echo(l *Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip checks c echoes.
func roundTrip(t testing.TB, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping\n" {
		t.Fatalf("echo: %q, %v", b, err)
	}
	_ = c.SetDeadline(time.Time{})
}

// blackhole returns a loopback address whose TCP connections complete but
// never get a TLS answer: a listener that never accepts.
func blackhole(t testing.TB, host string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t testing.TB, host string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return ap
}

func addrOf(l *Listener) netip.AddrPort { return netip.MustParseAddrPort(l.Addr().String()) }

func noLocal() []netip.Prefix { return nil }
