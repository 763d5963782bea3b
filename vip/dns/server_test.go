package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// serve runs s on a loopback address for the rest of the test.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

// resolver is Go's own resolver asking only addr, over network ("udp" or
// "tcp").
func resolver(addr, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// A real resolver client, over UDP and over TCP: NODE.grid resolves to
// the node's addresses, an unknown name is not found (NXDOMAIN), a name
// outside the zone fails without an answer.
func TestServeResolver(t *testing.T) {
	s := testServer(t, testDirectory(), nil)
	addr := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, network := range []string{"udp", "tcp"} {
		r := resolver(addr, network)
		got, err := r.LookupNetIP(ctx, "ip", "n1.grid")
		slices.SortFunc(got, netip.Addr.Compare)
		if err != nil || !slices.Equal(got, []netip.Addr{n1v4, n1v6}) {
			t.Errorf("%s: n1.grid: %v %v", network, got, err)
		}
		got, err = r.LookupNetIP(ctx, "ip4", "N2.Grid.")
		if err != nil || !slices.Equal(got, []netip.Addr{n2v4}) {
			t.Errorf("%s: N2.Grid.: %v %v", network, got, err)
		}
		_, err = r.LookupNetIP(ctx, "ip", "nobody.grid")
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: nobody.grid: %v, want not found", network, err)
		}
		_, err = r.LookupNetIP(ctx, "ip", "example.org")
		if !errors.As(err, &de) || de.IsNotFound {
			t.Errorf("%s: example.org: %v, want a failure that is not a not-found (REFUSED)", network, err)
		}
		names, err := r.LookupAddr(ctx, n2v4.String())
		if err != nil || !slices.Equal(names, []string{"n2.grid."}) {
			t.Errorf("%s: reverse of %s: %v %v", network, n2v4, names, err)
		}
	}
	if st := s.Stats(); st.Queries == 0 || st.NXDomain == 0 || st.Refused == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TCP: a length of 0 or over MaxQuery closes the connection; a silent
// connection is closed after TCPIdle; past MaxTCP connections new ones
// are closed at once; UDP is answered meanwhile.
func TestServeTCPLimits(t *testing.T) {
	s := testServer(t, testDirectory(), func(c *Config) { c.MaxTCP, c.TCPIdle = 2, 300*time.Millisecond })
	addr := serve(t, s)
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
	}
	for _, prefix := range [][]byte{{0, 0}, {0xff, 0xff}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(prefix)
		if !closed(c) {
			t.Errorf("length %x: connection left open", prefix)
		}
		c.Close()
	}
	idle1, _ := net.Dial("tcp", addr)
	idle2, _ := net.Dial("tcp", addr)
	third, _ := net.Dial("tcp", addr)
	if !closed(third) {
		t.Error("a third connection past MaxTCP 2 was served")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := resolver(addr, "udp").LookupNetIP(ctx, "ip4", "n1.grid"); err != nil || len(got) != 1 {
		t.Errorf("UDP while TCP is full: %v %v", got, err)
	}
	if !closed(idle1) || !closed(idle2) {
		t.Error("idle connections left open")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Once Serve has returned, its sockets are closed: their address can be
// listened on again at once (a name server stopped and started again on
// its fixed address; before, Serve could return while its TCP listener
// was still being closed, and the bind failed: "address already in use").
func TestServeReleasesAddress(t *testing.T) {
	s := testServer(t, testDirectory(), nil)
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	for i := range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, pc, l) }()
		time.Sleep(200 * time.Microsecond) // into Accept and ReadFrom
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve: %v", err)
		}
		if pc, l, err = Listen(addr); err != nil {
			t.Fatalf("listen again after Serve returned (round %d): %v", i, err)
		}
	}
	pc.Close()
	l.Close()
}
