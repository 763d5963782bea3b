package hubserver

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// sameVirtual checks that a lookup by name of node n (from asker) gives
// want as its virtual addresses, and that each of them is, by the
// directory by address, n's.
func sameVirtual(t *testing.T, asker *hub.Session, name string, n *hub.Session, want ...netip.Addr) {
	t.Helper()
	ctx := context.Background()
	ms, err := asker.Lookup(ctx, name)
	if err != nil || len(ms) != 1 || ms[0].ID != n.Machine().ID {
		t.Fatalf("lookup %s: %v %v", name, ms, err)
	}
	if !slices.Equal(ms[0].Virtual, want) {
		t.Errorf("lookup %s gives virtual %v, want %v", name, ms[0].Virtual, want)
	}
	for _, a := range ms[0].Virtual {
		m, err := asker.LookupAddr(ctx, a)
		if err != nil || m.ID != n.Machine().ID || !slices.Equal(m.Virtual, ms[0].Virtual) {
			t.Errorf("the directory by address gives %s to %v (virtual %v, %v), the lookup by %s to %s with %v",
				a, m.ID.Short(), m.Virtual, err, name, n.Machine().ID.Short(), ms[0].Virtual)
		}
	}
}

// Two hubs: a lookup by name answers with exactly the virtual addresses
// the directory by address gives the node, from its own hub and from the
// other, in any case of the name; a new claim replaces them; a node that
// holds none is answered without.
func TestVirtualByName(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	ctx := context.Background()
	n1 := vipNode(t, "n1", a)
	here := vipNode(t, "here", a)
	there := vipNode(t, "there", b)
	sameVirtual(t, there, "n1", n1)
	if err := n1.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatal(err)
	}
	for _, asker := range []*hub.Session{here, there} {
		sameVirtual(t, asker, "n1", n1, v4a, v6a)
		sameVirtual(t, asker, "N1", n1, v4a, v6a)
		sameVirtual(t, asker, n1.Machine().ID.String(), n1, v4a, v6a)
	}
	if err := n1.ClaimAddrs(ctx, v4b, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	sameVirtual(t, there, "n1", n1, v4b)
	for _, gone := range []netip.Addr{v4a, v6a} {
		if m, err := there.LookupAddr(ctx, gone); err == nil {
			t.Errorf("%s released, but the directory gives it to %v", gone, m)
		}
	}
	// a refused claim: the name gives what the node holds, not what it asked
	if err := here.ClaimAddrs(ctx, v4b, v6b); err == nil {
		t.Fatal("a claim of n1's address succeeded")
	}
	sameVirtual(t, there, "here", here, v6b)
	sameVirtual(t, there, "n1", n1, v4b)
}

// A node that says it holds virtual addresses (in its hello or a machine
// update) does not: lookups give what the directory gives it.
func TestVirtualByNameNotSelfDeclared(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	ctx := context.Background()
	cr := creds(t)
	liar, err := hub.Attach(ctx, hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: "liar", Virtual: []netip.Addr{v4a}},
		Hubs: []string{a.Addr().String()}, Logf: testLogf(t, "liar: ")})
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	asker := vipNode(t, "asker", a)
	sameVirtual(t, asker, "liar", liar)
	if m, err := asker.LookupAddr(ctx, v4a); err == nil {
		t.Errorf("a self-declared address is in the directory: %v", m)
	}
}

// A node that re-attaches at another hub (its hub stopped) claims its
// addresses again there: a lookup by name gives them with the new hub,
// and the directory by address agrees.
func TestVirtualByNameAfterReattach(t *testing.T) {
	actx, stopA := context.WithCancel(context.Background())
	alog := newLogBook(t, "a: ")
	a, err := New(Config{Name: "a", Creds: creds(t), Listen: "127.0.0.1:0", Interval: testInterval, Logf: alog.logf, NoSplice: true})
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Serve(actx) }()
	t.Cleanup(func() { stopA(); <-aDone })
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	ctx := context.Background()
	n1, err := attachAs(t, "n1", creds(t), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if n1.Hub().ID != a.ID() {
		t.Fatalf("n1 attached to %s first, not a (the first of its hubs)", n1.Hub().Name)
	}
	if err := n1.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatal(err)
	}
	asker := vipNode(t, "asker", b)
	sameVirtual(t, asker, "n1", n1, v4a, v6a)
	stopA()
	<-aDone
	aDone <- nil // for the cleanup
	testwait.Until(t, "n1 to hold its addresses again at hub b", 20*time.Second, func() bool {
		ms, err := asker.Lookup(ctx, "n1")
		v4, v6, _ := n1.VirtualAddrs()
		return err == nil && len(ms) == 1 && ms[0].HubName == "b" && len(ms[0].Virtual) == 2 && v4 == v4a && v6 == v6a
	})
	sameVirtual(t, asker, "n1", n1, v4a, v6a)
}

// A node of a version before wire.VersionVirtual decodes strictly (an
// unknown field closes its link): its lookup of a node holding virtual
// addresses is answered without them, and its link stays up.
func TestVirtualByNameOlderNode(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	n1 := vipNode(t, "n1", a)
	if err := n1.ClaimAddrs(context.Background(), v4a, v6a); err != nil {
		t.Fatal(err)
	}
	for _, at := range []*Hub{a, b} { // answered locally, and after asking the other hub
		old := dialVersion(t, at.Addr().String(), "old-"+at.Name(), wire.VersionVirtual-1)
		neu := dialVersion(t, at.Addr().String(), "new-"+at.Name(), wire.Version)
		for _, c := range []*versionNode{old, neu} {
			b := c.lookup(t, "n1")
			m, err := wire.Decode(b)
			if err != nil || m.Kind != wire.KFound || len(m.Found.Matches) != 1 {
				t.Fatalf("version %d node at %s: answer %s: %v", c.version, at.Name(), b, err)
			}
			has := bytes.Contains(b, []byte(`"virtual"`))
			if c.version < wire.VersionVirtual && has {
				t.Errorf("hub %s sent a version %d node virtual addresses: %s", at.Name(), c.version, b)
			}
			if c.version >= wire.VersionVirtual && !slices.Equal(m.Found.Matches[0].Virtual, []netip.Addr{v4a, v6a}) {
				t.Errorf("hub %s sent a version %d node %s", at.Name(), c.version, b)
			}
		}
		// still linked: a second lookup is answered
		old.lookup(t, "n1")
	}
}

// A neighbour hub of a version before wire.VersionVirtual asking a node's
// name (a routed lookup) gets the answer without the node's virtual
// addresses: the hub strips them from what it sends that hub.
func TestVirtualByNameOlderHub(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	n1 := vipNode(t, "n1", a)
	if err := n1.ClaimAddrs(context.Background(), v4a, v6a); err != nil {
		t.Fatal(err)
	}
	old := dialVersionAs(t, a.Addr().String(), "old", "hub", wire.VersionVirtual-1)
	old.send(t, &wire.Message{Kind: wire.KGossip, Gossip: &wire.Gossip{Routes: []wire.RouteAd{{Hub: old.id, Name: "old", State: 2}}}})
	testwait.Until(t, "hub a to route to the older hub", 10*time.Second, func() bool {
		for _, r := range a.Routes() {
			if r.Hub == old.id && r.Reachable() {
				return true
			}
		}
		return false
	})
	old.send(t, &wire.Message{Kind: wire.KRouted, Routed: &wire.Routed{FromHub: old.id, ToHub: a.ID(), TTL: 5,
		Msg: &wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: 7, Node: "n1"}}}})
	old.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := old.r.Read()
		if err != nil {
			t.Fatalf("the older hub: reading the answer: %v", err)
		}
		if f.Type != wire.TControl || !bytes.Contains(f.Payload, []byte(`"kind":"found"`)) {
			continue
		}
		m, err := wire.Decode(f.Payload)
		if err != nil || m.Kind != wire.KRouted || m.Routed.Msg.Found == nil || len(m.Routed.Msg.Found.Matches) != 1 ||
			m.Routed.Msg.Found.Matches[0].ID != n1.Machine().ID {
			t.Fatalf("answer %s: %v", f.Payload, err)
		}
		if bytes.Contains(f.Payload, []byte(`"virtual"`)) {
			t.Errorf("hub a sent a version %d hub virtual addresses: %s", old.version, f.Payload)
		}
		return
	}
}

// versionNode is a hand-driven node link of a given protocol version.
type versionNode struct {
	net.Conn
	sealer  *wire.Sealer
	r       *wire.Reader
	version int
	q       uint64
	id      identity.ID
}

// send sends m on the link.
func (n *versionNode) send(t *testing.T, m *wire.Message) {
	t.Helper()
	if _, err := n.Write(n.sealer.Append(nil, wire.TControl, 0, 0, wire.Encode(m))); err != nil {
		t.Fatal(err)
	}
}

func dialVersion(t *testing.T, addr, name string, version int) *versionNode {
	t.Helper()
	return dialVersionAs(t, addr, name, "node", version)
}

func dialVersionAs(t *testing.T, addr, name, role string, version int) *versionNode {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cr := creds(t)
	sec, err := hub.Secure(context.Background(), cr, c, true, identity.ID{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.WriteHello(c, sec.Sealer, &wire.Hello{Role: role, Machine: identity.Machine{ID: cr.Key.ID(), Name: name}, Version: version}); err != nil {
		t.Fatal(err)
	}
	if err := sec.Verdict(); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.ReadHello(sec.Reader, sec.Peer); err != nil {
		t.Fatal(err)
	}
	return &versionNode{Conn: c, sealer: sec.Sealer, r: sec.Reader, version: version, id: cr.Key.ID()}
}

// lookup sends a lookup of name and returns the payload of the answer.
func (n *versionNode) lookup(t *testing.T, name string) []byte {
	t.Helper()
	n.q++
	n.send(t, &wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: n.q, Node: name}})
	return n.answer(t)
}

// answer returns the payload of the next KFound on the link, routed or not.
func (n *versionNode) answer(t *testing.T) []byte {
	t.Helper()
	n.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := n.r.Read()
		if err != nil {
			t.Fatalf("version %d node: reading the answer: %v", n.version, err)
		}
		if f.Type == wire.TControl && bytes.Contains(f.Payload, []byte(`"kind":"found"`)) && !bytes.Contains(f.Payload, []byte(`"kind":"routed"`)) {
			return append([]byte(nil), f.Payload...)
		}
	}
}
