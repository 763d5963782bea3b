package hub

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A hub of a version before wire.VersionVirtual would close the link over
// a claim or a lookup by address: the session does not send them, and
// says why.
func TestVirtualOnOlderHub(t *testing.T) {
	someone := creds(t).Key.ID()
	me := identity.Machine{ID: someone, Name: "n"}
	s := &Session{cfg: SessionConfig{Machine: me}, machine: me, logf: quiet, lookups: map[uint64]chan *wire.Found{},
		ready: make(chan struct{}), done: make(chan struct{})}
	a, c := net.Pipe()
	sent := make(chan int64, 1)
	go func() { n, _ := io.Copy(io.Discard, c); sent <- n }()
	sl := &slink{s: s, hub: identity.Machine{ID: someone, Name: "old"}, version: 1, circuits: map[uint32]*Circuit{}, nextCirc: 1}
	sl.t = NewTrunk(a, nil, "hub old", false)
	s.cur = sl
	ctx := context.Background()
	err := s.ClaimAddrs(ctx, netip.MustParseAddr("100.96.0.5"), netip.Addr{})
	if !errors.Is(err, ErrNoVirtual) {
		t.Errorf("claim at a version 1 hub: %v", err)
	}
	if _, _, held := s.VirtualAddrs(); !errors.Is(held, ErrNoVirtual) {
		t.Errorf("VirtualAddrs after it: %v", held)
	}
	if _, err := s.LookupAddr(ctx, netip.MustParseAddr("100.96.0.5")); !errors.Is(err, ErrNoVirtual) {
		t.Errorf("lookup at a version 1 hub: %v", err)
	}
	if err := s.ClaimAddrs(ctx, netip.MustParseAddr("224.0.0.1"), netip.Addr{}); err == nil || errors.Is(err, ErrNoVirtual) {
		t.Errorf("a multicast claim: %v", err)
	}
	if q := sl.t.Queued(); q != 0 {
		t.Errorf("the session queued %d bytes for the older hub", q)
	}
	sl.t.Close(nil)
	a.Close()
	if n := <-sent; n != 0 {
		t.Errorf("the session sent %d bytes to the older hub", n)
	}
}
