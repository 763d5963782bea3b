package vconn

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/portmap"
)

// fakeMapping stands for a gateway's mapping: these unit tests run on
// loopback and must not probe any network.
type fakeMapping struct {
	mu     sync.Mutex
	st     portmap.Status
	closed int
}

func (f *fakeMapping) Status() portmap.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeMapping) set(st portmap.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

func (f *fakeMapping) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

func (f *fakeMapping) closes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// fakeGateway replaces mapPort for the test: each call gets result(port).
type fakeGateway struct {
	calls atomic.Int32
	mu    sync.Mutex
	cfg   portmap.Config
	port  uint16
}

func fakeMapPort(t *testing.T, result func(port uint16) (*fakeMapping, error)) *fakeGateway {
	g := &fakeGateway{}
	old := mapPort
	mapPort = func(ctx context.Context, cfg portmap.Config, port uint16) (mapping, error) {
		g.calls.Add(1)
		g.mu.Lock()
		g.cfg, g.port = cfg, port
		g.mu.Unlock()
		m, err := result(port)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	t.Cleanup(func() { mapPort = old })
	return g
}

func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// found reports whether s's lookup of name lists ap among its addresses.
func found(s *hub.Session, name string, ap netip.AddrPort) bool {
	ms, err := s.Lookup(context.Background(), name)
	return err == nil && len(ms) == 1 && slices.Contains(ms[0].Addrs, ap)
}

// A node with PortMap maps its direct listener's port, advertises the
// external endpoint to its hub (others' lookups return it), advertises a
// new one when the mapping changes, withdraws it when the lease ran out
// unrenewed, and closes the mapping when it stops.
func TestPortMapAdvertised(t *testing.T) {
	h := testHub(t, "h")
	fm := &fakeMapping{}
	gw := fakeMapPort(t, func(port uint16) (*fakeMapping, error) {
		fm.set(portmap.Status{Protocol: portmap.NATPMP, Gateway: "192.168.15.1",
			Internal: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
			External: netip.MustParseAddrPort("203.0.113.21:41000"), Lifetime: portMapLease, Expires: time.Now().Add(portMapLease)})
		return fm, nil
	})
	a := startNode(t, Config{Name: "a", ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, PortMap: true})
	b := testNode(t, "b", h)
	ext := netip.MustParseAddrPort("203.0.113.21:41000")
	testwait.Until(t, "b's lookup to return a's mapped endpoint", 0, func() bool { return found(b.Session(), "a", ext) })
	gw.mu.Lock()
	cfg, port := gw.cfg, gw.port
	gw.mu.Unlock()
	if port != a.direct.Port() || cfg.Lifetime != portMapLease || cfg.Description != "gridlink a" || cfg.OnChange == nil {
		t.Errorf("mapped port %d with %+v; want the direct port %d, a lease of %v, a description and OnChange", port, cfg, a.direct.Port(), portMapLease)
	}
	if m := a.Machine(); !slices.Contains(m.Addrs, ext) || m.Addrs[0] == ext {
		t.Errorf("a's addresses %v: want its own first, then %v", m.Addrs, ext)
	}
	if st := a.PortMap(); !st.Enabled || !st.Mapped || st.Advertised != ext || st.Err != nil || st.At.IsZero() {
		t.Errorf("PortMap() = %+v", st)
	}

	// the gateway gave another port at a renewal.
	moved := netip.MustParseAddrPort("203.0.113.21:41001")
	st := fm.Status()
	st.External, st.Renewals = moved, 1
	cfg.OnChange(st)
	testwait.Until(t, "the new endpoint to replace the old", 0, func() bool { return found(b.Session(), "a", moved) && !found(b.Session(), "a", ext) })

	// renewals failed and the lease ran out: withdrawn.
	st.Err, st.Expires = errors.New("gateway gone"), time.Now().Add(-time.Second)
	cfg.OnChange(st)
	testwait.Until(t, "the endpoint to be withdrawn", 0, func() bool { return !found(b.Session(), "a", moved) })
	if s := a.PortMap(); !s.Mapped || s.Advertised.IsValid() || s.Err == nil {
		t.Errorf("after the lease ran out: %+v", s)
	}
	// a failed renewal within the lease keeps it advertised.
	st.Expires = time.Now().Add(time.Minute)
	cfg.OnChange(st)
	testwait.Until(t, "the endpoint to be back", 0, func() bool { return found(b.Session(), "a", moved) })

	a.Close()
	if n := fm.closes(); n != 1 {
		t.Errorf("the mapping was closed %d times by Node.Close, want once", n)
	}
	if s := a.PortMap(); s.Mapped || s.Advertised.IsValid() {
		t.Errorf("after Close: %+v", s)
	}
	if gw.calls.Load() != 1 {
		t.Errorf("%d mapping requests, want 1", gw.calls.Load())
	}
}

// Without PortMap nothing is asked of any gateway; a failed request is
// reported and nothing advertised; a mapping to another address than the
// one the listener is bound to is not advertised.
func TestPortMapOffFailedElsewhere(t *testing.T) {
	h := testHub(t, "h")
	gw := fakeMapPort(t, func(uint16) (*fakeMapping, error) {
		return nil, &portmap.MapError{Port: 1, Errs: []error{errors.New("no IGD answered on the LAN within 2s")}}
	})
	off := testNode(t, "off", h)
	if st := off.PortMap(); st.Enabled || st.Mapped || st.Err != nil {
		t.Errorf("PortMap() without Config.PortMap: %+v", st)
	}
	failing := startNode(t, Config{Name: "failing", ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, PortMap: true})
	testwait.Until(t, "the failure to be recorded", 0, func() bool { return failing.PortMap().Err != nil })
	if st := failing.PortMap(); st.Mapped || st.Advertised.IsValid() || len(failing.Machine().Addrs) != 1 {
		t.Errorf("after a failure: %+v, addresses %v", st, failing.Machine().Addrs)
	}
	if n := gw.calls.Load(); n != 1 {
		t.Errorf("%d mapping requests (one node asked), want 1", n)
	}
	start := time.Now()
	failing.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v while waiting to retry the mapping", d)
	}

	elsewhere := &fakeMapping{}
	fakeMapPort(t, func(port uint16) (*fakeMapping, error) {
		elsewhere.set(portmap.Status{Protocol: portmap.UPnP, Internal: netip.MustParseAddrPort("192.168.15.2:7"), External: netip.MustParseAddrPort("203.0.113.21:7")})
		return elsewhere, nil
	})
	e := startNode(t, Config{Name: "e", ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, PortMap: true})
	testwait.Until(t, "the mapping", 0, func() bool { return e.PortMap().Mapped })
	if st := e.PortMap(); st.Advertised.IsValid() || len(e.Machine().Addrs) != 1 {
		t.Errorf("a mapping to 192.168.15.2 for a listener on 127.0.0.1 was advertised: %+v", st)
	}
	e.Close()
	if elsewhere.closes() != 1 {
		t.Error("the unadvertised mapping was not closed")
	}
}
