package hub

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// mapped is an address a port mapping might add.
var mapped = netip.MustParseAddrPort("203.0.113.21:40123")

// A link installed after SetMachine whose hello carried the older machine
// is sent the newer one at once.
func TestMachineCatchUp(t *testing.T) {
	id := creds(t).Key.ID()
	old := identity.Machine{ID: id, Name: "n"}
	cur := identity.Machine{ID: id, Name: "n", Addrs: []netip.AddrPort{mapped}}
	s := &Session{cfg: SessionConfig{Machine: old}, machine: cur, logf: quiet, ready: make(chan struct{}), done: make(chan struct{})}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sl := &slink{s: s, hub: identity.Machine{ID: id, Name: "h"}, sent: old, circuits: map[uint32]*Circuit{}}
	sl.t = NewTrunk(a, nil, "hub h", false)
	defer sl.t.Close(nil)
	s.install(sl, 0)
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := wire.NewReader(b).Read()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := wire.Decode(f.Payload)
	if err != nil || msg.Kind != wire.KMachine || !machineEqual(*msg.Machine, cur) {
		t.Fatalf("sent %+v (%v), want a machine message with %+v", msg, err, cur)
	}
	// an up-to-date link is sent nothing.
	sl2 := &slink{s: s, hub: sl.hub, sent: cur, circuits: map[uint32]*Circuit{}}
	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	sl2.t = NewTrunk(c, nil, "hub h", false)
	defer sl2.t.Close(nil)
	s.install(sl2, 0)
	_ = d.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := io.ReadFull(d, make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("an up-to-date link was sent %d bytes", n)
	}
}
