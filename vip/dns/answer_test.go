package dns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

var (
	n1v4 = netip.MustParseAddr("100.96.0.5")
	n1v6 = netip.MustParseAddr("fd67:726c::5")
	n2v4 = netip.MustParseAddr("100.96.0.6")
)

// directory is a Lookup over a fixed table, counting its calls.
type directory struct {
	mu    sync.Mutex
	nodes map[string][]netip.Addr
	fail  error // returned for every name when set
	calls atomic.Int64
	names []string
}

func (d *directory) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = append(d.names, name)
	if d.fail != nil {
		return nil, d.fail
	}
	if a, ok := d.nodes[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("lookup %s: %w", name, ErrNotFound)
}

func (d *directory) lookupAddr(ctx context.Context, a netip.Addr) (string, error) {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	for n, as := range d.nodes {
		if slices.Contains(as, a) {
			return n, nil
		}
	}
	return "", ErrNotFound
}

func testDirectory() *directory {
	return &directory{nodes: map[string][]netip.Addr{"n1": {n1v4, n1v6}, "n2": {n2v4}, "das3v-n1.vu": {n1v4}, "empty": nil}}
}

func testServer(t testing.TB, d *directory, tweak func(*Config)) *Server {
	t.Helper()
	cfg := Config{Lookup: d.lookup, LookupAddr: d.lookupAddr, Prefixes: []netip.Prefix{netip.MustParsePrefix("100.96.0.0/12"), netip.MustParsePrefix("fd67:726c::/32")}}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// query builds a query for name and type t (with an EDNS OPT if edns).
func query(t testing.TB, id uint16, name string, qt dnsmessage.Type, edns bool) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qt, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if edns {
		b.StartAdditionals()
		var h dnsmessage.ResourceHeader
		h.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
		b.OPTResource(h, dnsmessage.OPTResource{})
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// parsed is an answer as a test reads it.
type parsed struct {
	h       dnsmessage.Header
	q       []dnsmessage.Question
	answers []dnsmessage.Resource
	auth    []dnsmessage.Resource
	extra   []dnsmessage.Resource
}

func parse(t testing.TB, b []byte) *parsed {
	t.Helper()
	if b == nil {
		t.Fatal("no answer")
	}
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("the answer does not parse: %v", err)
	}
	return &parsed{m.Header, m.Questions, m.Answers, m.Authorities, m.Additionals}
}

func (p *parsed) addrs() []netip.Addr {
	var out []netip.Addr
	for _, r := range p.answers {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}

var client = netip.MustParseAddr("127.0.0.1")

// A and AAAA for NAME.grid., in any case, with a TTL of 5 s, the question
// echoed as asked; NXDOMAIN with the zone's SOA for a name no node has;
// NODATA for a family the node has no address of; REFUSED outside the
// zone; SERVFAIL when the lookup fails.
func TestAnswers(t *testing.T) {
	d := testDirectory()
	s := testServer(t, d, nil)
	ctx := context.Background()
	cases := []struct {
		name  string
		qt    dnsmessage.Type
		rcode dnsmessage.RCode
		want  []netip.Addr
		soa   bool
	}{
		{"n1.grid.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{n1v4}, false},
		{"n1.grid.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []netip.Addr{n1v6}, false},
		{"N1.GrId.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{n1v4}, false},
		{"n1.grid.", dnsmessage.TypeALL, dnsmessage.RCodeSuccess, []netip.Addr{n1v4, n1v6}, false},
		{"das3v-n1.vu.grid.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{n1v4}, false},
		{"n2.grid.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil, true},
		{"n2.grid.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, nil, true},
		{"empty.grid.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil, true},
		{"nobody.grid.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil, true},
		{"bad*name.grid.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil, true},
		{strings.Repeat("a", 63) + ".b.grid.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil, true},
		{"grid.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil, true},
		{"example.org.", dnsmessage.TypeA, dnsmessage.RCodeRefused, nil, false},
		{"n1.grid.example.org.", dnsmessage.TypeA, dnsmessage.RCodeRefused, nil, false},
		{"notgrid.", dnsmessage.TypeA, dnsmessage.RCodeRefused, nil, false},
		{".", dnsmessage.TypeNS, dnsmessage.RCodeRefused, nil, false},
	}
	for i, c := range cases {
		p := parse(t, s.Handle(ctx, client, query(t, uint16(i+1), c.name, c.qt, false), false))
		if p.h.ID != uint16(i+1) || !p.h.Response || p.h.RCode != c.rcode || !p.h.RecursionDesired {
			t.Errorf("%s %v: header %+v, want rcode %v", c.name, c.qt, p.h, c.rcode)
		}
		if len(p.q) != 1 || p.q[0].Name.String() != c.name || p.q[0].Type != c.qt {
			t.Errorf("%s %v: question echoed as %v", c.name, c.qt, p.q)
		}
		if got := p.addrs(); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: addresses %v, want %v", c.name, c.qt, got, c.want)
		}
		for _, r := range p.answers {
			if r.Header.TTL != 5 || r.Header.Name.String() != c.name {
				t.Errorf("%s: record %v", c.name, r.Header)
			}
		}
		hasSOA := len(p.auth) == 1 && p.auth[0].Header.Type == dnsmessage.TypeSOA && p.auth[0].Header.Name.String() == "grid." &&
			p.auth[0].Body.(*dnsmessage.SOAResource).MinTTL == 5
		if hasSOA != c.soa {
			t.Errorf("%s %v: authority %v, want the SOA %v", c.name, c.qt, p.auth, c.soa)
		}
	}
	if p := parse(t, s.Handle(ctx, client, query(t, 1, "grid.", dnsmessage.TypeSOA, false), false)); len(p.answers) != 1 || p.h.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("the zone's SOA: %+v", p)
	}
	for _, name := range d.names {
		if name != strings.ToLower(name) {
			t.Errorf("looked up %q, not in lower case", name)
		}
	}
	if slices.ContainsFunc(d.names, func(n string) bool { return strings.Contains(n, "*") || len(n) > 63 }) {
		t.Errorf("names no node can have were looked up: %v", d.names)
	}

	// a lookup that fails: SERVFAIL, not cached
	d.fail = errors.New("hub link lost")
	p := parse(t, s.Handle(ctx, client, query(t, 7, "other.grid.", dnsmessage.TypeA, false), false))
	if p.h.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("a failed lookup: %v", p.h.RCode)
	}
	d.fail = nil
	d.nodes["other"] = []netip.Addr{n2v4}
	if p := parse(t, s.Handle(ctx, client, query(t, 8, "other.grid.", dnsmessage.TypeA, false), false)); !slices.Equal(p.addrs(), []netip.Addr{n2v4}) {
		t.Errorf("after the failure: %v %v", p.h.RCode, p.addrs())
	}
}

// Another zone: names under it are answered, "grid" is not ours then.
func TestZone(t *testing.T) {
	s := testServer(t, testDirectory(), func(c *Config) { c.Zone = "Grid.Example.ORG." })
	ctx := context.Background()
	if s.Zone() != "grid.example.org" {
		t.Errorf("zone %q", s.Zone())
	}
	if p := parse(t, s.Handle(ctx, client, query(t, 1, "n1.grid.example.org.", dnsmessage.TypeA, false), false)); !slices.Equal(p.addrs(), []netip.Addr{n1v4}) {
		t.Errorf("n1.grid.example.org: %v %v", p.h.RCode, p.addrs())
	}
	if p := parse(t, s.Handle(ctx, client, query(t, 1, "n1.grid.", dnsmessage.TypeA, false), false)); p.h.RCode != dnsmessage.RCodeRefused {
		t.Errorf("n1.grid outside the zone: %v", p.h.RCode)
	}
	for _, bad := range []string{"a..b", strings.Repeat("x", 64)} {
		if _, err := New(Config{Zone: bad, Lookup: testDirectory().lookup}); !errors.Is(err, ErrConfig) {
			t.Errorf("zone %q: %v", bad, err)
		}
	}
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no lookup: %v", err)
	}
}

// PTR for the virtual prefixes' reverse names: NODE.grid.; an address no
// node holds is NXDOMAIN; reverse names outside the prefixes are REFUSED.
func TestReverse(t *testing.T) {
	s := testServer(t, testDirectory(), nil)
	ctx := context.Background()
	for a, want := range map[netip.Addr]string{n1v6: "n1.grid.", n2v4: "n2.grid."} {
		name := ReverseName(a)
		if got, ok := reverseAddr(name); !ok || got != a {
			t.Errorf("reverse name %s reads as %v", name, got)
		}
		p := parse(t, s.Handle(ctx, client, query(t, 1, name, dnsmessage.TypePTR, false), false))
		if len(p.answers) != 1 || p.answers[0].Body.(*dnsmessage.PTRResource).PTR.String() != want {
			t.Errorf("PTR %s: %v %v", name, p.h.RCode, p.answers)
		}
	}
	for name, rcode := range map[string]dnsmessage.RCode{
		ReverseName(netip.MustParseAddr("100.96.9.9")): dnsmessage.RCodeNameError,
		ReverseName(netip.MustParseAddr("192.0.2.1")):  dnsmessage.RCodeRefused,
		"96.100.in-addr.arpa.":                         dnsmessage.RCodeRefused,
		"5.0.96.0100.in-addr.arpa.":                    dnsmessage.RCodeRefused,
		"5.0.96.256.in-addr.arpa.":                     dnsmessage.RCodeRefused,
	} {
		if p := parse(t, s.Handle(ctx, client, query(t, 1, name, dnsmessage.TypePTR, false), false)); p.h.RCode != rcode {
			t.Errorf("PTR %s: %v, want %v", name, p.h.RCode, rcode)
		}
	}
}

// An EDNS query gets an OPT record back; one without, none.
func TestEDNS(t *testing.T) {
	s := testServer(t, testDirectory(), nil)
	p := parse(t, s.Handle(context.Background(), client, query(t, 1, "n1.grid.", dnsmessage.TypeA, true), false))
	if len(p.extra) != 1 || p.extra[0].Header.Type != dnsmessage.TypeOPT || !slices.Equal(p.addrs(), []netip.Addr{n1v4}) {
		t.Errorf("EDNS answer: %v %v", p.extra, p.addrs())
	}
	p = parse(t, s.Handle(context.Background(), client, query(t, 1, "n1.grid.", dnsmessage.TypeA, false), false))
	if len(p.extra) != 0 {
		t.Errorf("an OPT record in the answer to a query without: %v", p.extra)
	}
}

// Answers and not-founds are cached for the TTL: a program looping on a
// name reaches the directory once; queries for one name at once make one
// lookup.
func TestCache(t *testing.T) {
	d := testDirectory()
	s := testServer(t, d, nil)
	ctx := context.Background()
	for i := range 50 {
		for _, name := range []string{"n1.grid.", "N1.grid.", "nobody.grid."} {
			s.Handle(ctx, client, query(t, uint16(i), name, dnsmessage.TypeA, false), false)
			s.Handle(ctx, client, query(t, uint16(i), name, dnsmessage.TypeAAAA, false), false)
		}
	}
	if n := d.calls.Load(); n != 2 {
		t.Errorf("%d lookups for 300 queries of two names, want 2", n)
	}
	if st := s.Stats(); st.Lookups != 2 || st.CacheHits != 298 || st.NXDomain != 100 {
		t.Errorf("stats %+v", st)
	}

	d2 := testDirectory()
	slow := make(chan struct{})
	s2 := testServer(t, d2, func(c *Config) {
		c.Lookup = func(ctx context.Context, name string) ([]netip.Addr, error) {
			<-slow
			return d2.lookup(ctx, name)
		}
	})
	var wg sync.WaitGroup
	answers := make([][]byte, 20)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s2.Handle(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), query(t, 1, "n2.grid.", dnsmessage.TypeA, false), false)
		}()
	}
	for s2.Stats().Queries < 20 {
		runtime.Gosched() // until all queries are in (they wait on the one lookup)
	}
	close(slow)
	wg.Wait()
	if n := d2.calls.Load(); n != 1 {
		t.Errorf("%d lookups for 20 queries of one name at once, want 1", n)
	}
	for _, a := range answers {
		if p := parse(t, a); !slices.Equal(p.addrs(), []netip.Addr{n2v4}) {
			t.Errorf("a waiting query got %v", p.addrs())
		}
	}
}
