package vip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
)

func TestParseRules(t *testing.T) {
	r, err := ParseRules(`
		# the physics cluster
		allow group:physics tcp/22,5000-6000 udp   # ssh and MPI
		allow user:alice any; allow node:gw icmp
		allow * udp/53
	`)
	if err != nil {
		t.Fatal(err)
	}
	want := "allow group:physics tcp/22,5000-6000 udp\nallow user:alice any\nallow node:gw icmp\nallow * udp/53"
	if got := r.String(); got != want {
		t.Errorf("read back as\n%s\nwant\n%s", got, want)
	}
	again, err := ParseRules(r.String())
	if err != nil || again.String() != want {
		t.Errorf("its own text: %v, %q", err, again.String())
	}
	var flag Rules
	if err := flag.Set("allow group:a tcp/1"); err != nil {
		t.Fatal(err)
	}
	if err := flag.Set("allow group:b udp/2"); err != nil || flag.String() != "allow group:a tcp/1\nallow group:b udp/2" {
		t.Errorf("two flags: %v, %q", err, flag.String())
	}
	var zero Rules
	if z, err := ParseRules(" # nothing\n ; "); err != nil || !z.IsZero() || !zero.IsZero() || r.IsZero() {
		t.Errorf("empty text: %v, %v", z, err)
	}
	if err := zero.UnmarshalText([]byte("allow * icmp")); err != nil || zero.String() != "allow * icmp" {
		t.Errorf("UnmarshalText: %v, %q", err, zero.String())
	}

	for _, c := range []struct{ text, entry, problem string }{
		{"deny * any", "deny * any", `starts with "deny"`},
		{"allow * tcp/22\nallow group:", "allow group:", "want allow WHO WHAT"},
		{"allow group: tcp", "allow group: tcp", "empty name"},
		{"allow role:hub any", "allow role:hub any", `kind "role" is none of`},
		{"allow alice any", "allow alice any", "none of *, group:NAME"},
		{"allow * tcp/22; allow * tcp/65536", "allow * tcp/65536", `port "65536" is not a port`},
		{"allow * udp/10-5", "allow * udp/10-5", "ends below its start"},
		{"allow * tcp/", "allow * tcp/", `port "" is not a port`},
		{"allow * icmp/8", "allow * icmp/8", "takes no ports"},
		{"allow * sctp/9", "allow * sctp/9", `protocol "sctp" is none of`},
	} {
		_, err := ParseRules(c.text)
		var re *RuleError
		if !errors.As(err, &re) || !errors.Is(err, ErrBadRule) || re.Text != c.entry || !strings.Contains(re.Problem, c.problem) {
			t.Errorf("%q: %v; want the entry %q refused for %q", c.text, err, c.entry, c.problem)
			continue
		}
		if want := strings.Count(c.text[:strings.Index(c.text, c.entry)], "\n") + strings.Count(c.text[:strings.Index(c.text, c.entry)], ";") + 1; re.Entry != want {
			t.Errorf("%q: entry %d, want %d", c.text, re.Entry, want)
		}
	}
}

func proofFor(name string, role ca.Role, groups ...string) principal {
	return principal{chain: &chain.Result{Attributes: ca.Attributes{Name: name, Role: role, Groups: groups}}}
}

func TestRulesAllow(t *testing.T) {
	r, err := ParseRules("allow group:physics tcp/22,5000-6000; allow user:alice any; allow node:gw icmp; allow * udp/53")
	if err != nil {
		t.Fatal(err)
	}
	id := testID(7)
	tcp := func(port uint16) transport { return transport{proto: protoTCP, ports: true, dstPort: port} }
	udp := func(port uint16) transport { return transport{proto: protoUDP, ports: true, dstPort: port} }
	ping := transport{proto: protoICMPv6, icmp: true, icmpType: icmpv6EchoRequest}
	physicist, chemist := proofFor("bob", ca.User, "physics"), proofFor("carol", ca.User, "chemistry")
	alice, aliceNode, gw := proofFor("alice", ca.User), proofFor("alice", ca.Node), proofFor("gw", ca.Node)
	open := principal{}
	for _, c := range []struct {
		who  string
		pr   principal
		id   identity.ID
		t    transport
		want bool
	}{
		{"physicist ssh", physicist, id, tcp(22), true},
		{"physicist MPI port", physicist, id, tcp(5500), true},
		{"physicist above the range", physicist, id, tcp(6001), false},
		{"physicist udp", physicist, id, udp(5500), false},
		{"physicist later TCP fragment", physicist, id, transport{proto: protoTCP, fragment: true}, true},
		{"chemist later TCP fragment", chemist, id, transport{proto: protoTCP, fragment: true}, false},
		{"physicist DNS", physicist, id, udp(53), true},
		{"chemist ssh", chemist, id, tcp(22), false},
		{"chemist DNS", chemist, id, udp(53), true},
		{"chemist ping", chemist, id, ping, false},
		{"alice anything", alice, id, transport{proto: 47}, true},
		{"a node named alice is not the user", aliceNode, id, tcp(22), false},
		{"gw ping", gw, id, ping, true},
		{"open grid ping", open, id, ping, false},
		{"open grid DNS", open, id, udp(53), true},
	} {
		if got := r.allows(c.id, c.pr, c.t); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.who, got, c.want)
		}
	}
	byID, err := ParseRules("allow node:" + strings.ToUpper(id.String()[:12]) + " tcp/22; allow node:" + id.String()[:9] + " any")
	if err != nil {
		t.Fatal(err)
	}
	if !byID.allows(id, open, tcp(22)) || byID.allows(id, open, tcp(23)) || byID.allows(testID(8), open, tcp(22)) {
		t.Errorf("node:IDPREFIX: a prefix of 12 matches that node only, one of 9 none")
	}
	var zero Rules
	if !zero.allows(id, open, tcp(1)) {
		t.Errorf("the zero Rules deny")
	}
}

// proofConn is a pipe end carrying the far end's proof, as vconn.Conn
// does.
type proofConn struct {
	net.Conn
	peer pki.Peer
}

func (c proofConn) Proof() pki.Peer { return c.peer }

// proofDialer dials over pipes, handing the far end the dialer's proof.
type proofDialer struct {
	g      func() *grid
	from   identity.ID
	proofs map[identity.ID]principal
}

func (d proofDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	g := d.g()
	g.mu.Lock()
	to := g.byID[id]
	g.mu.Unlock()
	if to == nil {
		return nil, fmt.Errorf("no node %s", id.Short())
	}
	mine, theirs := net.Pipe()
	if err := to.net.Accept(&proofConn{theirs, pki.Peer{ID: d.from, Chain: d.proofs[d.from].chain}}, d.from); err != nil {
		return nil, err
	}
	return &proofConn{mine, pki.Peer{ID: id, Chain: d.proofs[id].chain}}, nil
}

func tcp4(src, dst netip.Addr, sport, dport uint16, flags byte, tag string) []byte {
	return ipv4(src, dst, protoTCP, append(tcpHeader(sport, dport, flags), tag...))
}

// A member outside the group the rules let reach port 22 sends SYNs to
// it: each is dropped, counted and logged at the receiving node, and
// answered with ICMP administratively prohibited, while a member of the
// group keeps its flow to the same port, and the receiving node's own
// flow to the outsider gets its answers.
func TestRulesDenyOutsiderAllowMember(t *testing.T) {
	var g *grid
	proofs := map[identity.ID]principal{}
	g = newGrid(t, 3, func(c *Config) {
		c.Dialer = proofDialer{func() *grid { return g }, c.ID, proofs}
		if len(proofs) == 1 { // b, the protected node
			var err error
			if c.Rules, err = ParseRules("allow group:physics tcp/22; allow * icmp"); err != nil {
				t.Fatal(err)
			}
		}
		proofs[c.ID] = proofFor(fmt.Sprint("node", len(proofs)), ca.User, []string{"physics", "staff", "chemistry"}[len(proofs)])
	})
	a, b, c := g.nodes[0], g.nodes[1], g.nodes[2]

	// The outsider's SYNs, and the member's flow, interleaved.
	var syns, flow [][]byte
	for i := range 5 {
		syns = append(syns, tcp4(c.v4, b.v4, uint16(40000+i), 22, tcpSYN, "syn"))
	}
	for i := range 50 {
		flow = append(flow, tcp4(a.v4, b.v4, 33000, 22, tcpACK, fmt.Sprint("member ", i)))
	}
	for i := range 5 {
		c.send(t, syns[i])
		a.send(t, flow[10*i:10*i+10]...)
	}
	for i := range 5 {
		checkICMPv4(t, c.recv(t, fmt.Sprint("ICMP prohibited about SYN ", i)), 3, 13, b.v4, c.v4, syns[i])
	}
	for i, p := range flow {
		expect(t, b, p, fmt.Sprint("the member's packet ", i))
	}
	// Pings are allowed to everyone; IPv6 UDP is nobody's.
	ping := ipv4(c.v4, b.v4, protoICMPv4, []byte{8, 0, 0, 0, 0, 9, 0, 1})
	c.send(t, ping)
	expect(t, b, ping, "the outsider's ping")
	dns := ipv6(c.v6, b.v6, protoUDP, udpHeader(5353, 53, 10))
	c.send(t, dns)
	checkICMPv6(t, c.recv(t, "ICMPv6 prohibited about UDP"), 1, 1, b.v6, c.v6, dns)
	// b's own flow to c: c's answers pass b's rules; c's new flow from
	// the same port to another of b's ports does not.
	out := tcp4(b.v4, c.v4, 45000, 80, tcpSYN, "b opens")
	b.send(t, out)
	expect(t, c, out, "b's SYN to c")
	answer := tcp4(c.v4, b.v4, 80, 45000, tcpSYN|tcpACK, "c answers")
	c.send(t, answer)
	expect(t, b, answer, "c's answer to b's flow")
	other := tcp4(c.v4, b.v4, 80, 45001, tcpSYN, "c opens")
	c.send(t, other)
	checkICMPv4(t, c.recv(t, "ICMP prohibited about c's own flow"), 3, 13, b.v4, c.v4, other)

	// An ICMP error about b's packet to c passes b's rules; one c forges
	// about b's packets to a does not (and gets no answer).
	unreach := ipv4(c.v4, b.v4, protoICMPv4, append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, out[:28]...))
	c.send(t, unreach)
	expect(t, b, unreach, "c's port unreachable about b's SYN")
	forged := ipv4(c.v4, b.v4, protoICMPv4, append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, flow[0][:28]...))
	copy(forged[20+8+12:], b.v4.AsSlice()) // quoting b -> a
	copy(forged[20+8+16:], a.v4.AsSlice())
	c.send(t, forged, ping)
	expect(t, b, ping, "the ping after the forged error")

	s := b.net.Stats()
	if s.Drops.Denied != 8 || s.Peer(c.id).Denied != 8 || s.Peer(a.id).Denied != 0 || s.Peer(a.id).RecvPackets != 50 {
		t.Errorf("b: drops %+v; c %+v; a %+v; want 8 of c's denied, a's 50 received", s.Drops, s.Peer(c.id), s.Peer(a.id))
	}
	if pb := c.net.Stats().Peer(b.id); pb.Refused != 7 { // the forged error got no answer
		t.Errorf("c's peer b: %+v; want 7 refusals (ICMP prohibited) counted", pb)
	}
	if cl := c.log.String(); !strings.Contains(cl, "refused by the peer: "+dropDenied.String()) || !strings.Contains(cl, "port=22") || !strings.Contains(cl, b.id.Short()) {
		t.Errorf("c's log does not name the refusal, b and the port:\n%s", cl)
	}
	log := b.log.String()
	for _, want := range []string{dropDenied.String(), c.id.Short(), "proto=tcp", "port=22", "node2 (user)"} {
		if !strings.Contains(log, want) {
			t.Errorf("b's log does not say %q:\n%s", want, log)
		}
	}

	// Without rules, the outsider's SYN goes through.
	b.net.SetRules(Rules{})
	c.send(t, syns[0])
	expect(t, b, syns[0], "c's SYN once b has no rules")
}

// Any text ParseRules takes reads back as itself from its String.
func FuzzParseRules(f *testing.F) {
	f.Add("allow group:physics tcp/22,5000-6000 udp; allow * icmp # c\nallow node:gw any")
	f.Add("allow user:a tcp/1-2,3 udp/4")
	f.Add("deny * any")
	f.Fuzz(func(t *testing.T, text string) {
		r, err := ParseRules(text)
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("error %v is not a RuleError", err)
			}
			return
		}
		again, err := ParseRules(r.String())
		if err != nil || again.String() != r.String() {
			t.Fatalf("%q read as %q, which reads as %q, %v", text, r.String(), again.String(), err)
		}
	})
}
