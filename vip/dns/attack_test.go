package dns

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// lookupBound is the most lookups a limiter of rate r and burst b allows
// over d.
func lookupBound(r float64, b int, d time.Duration) int64 {
	return int64(b) + int64(r*d.Seconds()) + 1
}

// A flood of random names from one client (a program looping on lookups
// of names that do not exist, or an attacker on the host) reaches the
// directory at most at the client's lookup limit; the rest are SERVFAIL
// or dropped, and other clients are still answered.
func TestFloodOneClient(t *testing.T) {
	d := testDirectory()
	s := testServer(t, d, nil)
	ctx := context.Background()
	start := time.Now()
	rcodes := map[dnsmessage.RCode]int{}
	dropped := 0
	for i := range 5000 {
		out := s.Handle(ctx, client, query(t, uint16(i), fmt.Sprintf("r%d.grid.", rand.Uint64()), dnsmessage.TypeA, false), false)
		if out == nil {
			dropped++
			continue
		}
		rcodes[parse(t, out).h.RCode]++
	}
	elapsed := time.Since(start)
	if n, max := d.calls.Load(), lookupBound(s.cfg.ClientLookups, s.cfg.ClientLookupBurst, elapsed); n > max {
		t.Errorf("5000 random names made %d lookups in %v; the client's limit allows %d", n, elapsed, max)
	}
	t.Logf("5000 random names from one client in %v: %d lookups, answers %v, %d dropped", elapsed.Round(time.Millisecond), d.calls.Load(), rcodes, dropped)
	if rcodes[dnsmessage.RCodeNameError] == 0 || rcodes[dnsmessage.RCodeServerFailure] == 0 {
		t.Errorf("answers %v, dropped %d: want some NXDOMAIN, then SERVFAIL past the limit", rcodes, dropped)
	}
	if lim := s.Stats().Limited; lim == 0 {
		t.Error("no query counted as limited")
	}
	// another client is answered
	other := netip.MustParseAddr("127.0.0.2")
	if p := parse(t, s.Handle(ctx, other, query(t, 1, "n1.grid.", dnsmessage.TypeA, false), false)); p.h.RCode != dnsmessage.RCodeSuccess || len(p.addrs()) != 1 {
		t.Errorf("another client during the flood: %v %v", p.h.RCode, p.addrs())
	}
}

// A flood from many source addresses (spoofed, or many programs) reaches
// the directory at most at the limit of all clients together.
func TestFloodManyClients(t *testing.T) {
	d := testDirectory()
	s := testServer(t, d, nil)
	ctx := context.Background()
	start := time.Now()
	for i := range 5000 {
		from := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		s.Handle(ctx, from, query(t, uint16(i), fmt.Sprintf("r%d.grid.", rand.Uint64()), dnsmessage.TypeAAAA, false), false)
	}
	elapsed := time.Since(start)
	if n, max := d.calls.Load(), lookupBound(s.cfg.Lookups, s.cfg.LookupBurst, elapsed); n > max {
		t.Errorf("5000 random names from 5000 clients made %d lookups in %v; the limit allows %d", n, elapsed, max)
	}
	t.Logf("5000 random names from 5000 clients in %v: %d lookups", elapsed.Round(time.Millisecond), d.calls.Load())
	if n := len(s.cache.clients); n > maxClients {
		t.Errorf("%d client limiters kept, more than %d", n, maxClients)
	}
}

// A client over its query limit is dropped (no answer to amplify or
// spend time on).
func TestQueryLimit(t *testing.T) {
	s := testServer(t, testDirectory(), func(c *Config) { c.ClientQueries, c.ClientQueryBurst = 1, 10 })
	dropped := 0
	for i := range 100 {
		if s.Handle(context.Background(), client, query(t, uint16(i), "n1.grid.", dnsmessage.TypeA, false), false) == nil {
			dropped++
		}
	}
	if dropped < 80 {
		t.Errorf("%d of 100 queries dropped at 1 a second with a burst of 10", dropped)
	}
}

// Malformed queries get a clean answer (FORMERR, NOTIMP) or none, never
// a crash or a lookup: oversized, truncated, a compression loop, two
// questions, records where a query has none, another class or opcode,
// an answer sent to us.
func TestMalformed(t *testing.T) {
	d := testDirectory()
	s := testServer(t, d, nil)
	ctx := context.Background()
	good := query(t, 0x1234, "n1.grid.", dnsmessage.TypeA, false)

	oversized := append(query(t, 0x1234, "n1.grid.", dnsmessage.TypeA, false), make([]byte, MaxQuery)...)

	// a question whose name is a pointer to itself
	loop := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}
	// a name whose pointer points forward into a second pointer back
	loop2 := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 14, 0xc0, 12, 0, 1, 0, 1}

	two := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("n1.grid."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("n2.grid."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		out, _ := b.Finish()
		return out
	}()
	withAnswer := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("n1.grid."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		b.StartAnswers()
		b.AResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("n1.grid."), Class: dnsmessage.ClassINET}, dnsmessage.AResource{A: [4]byte{6, 6, 6, 6}})
		out, _ := b.Finish()
		return out
	}()
	chaos := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("version.bind."), Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS})
		out, _ := b.Finish()
		return out
	}()
	opcode := append([]byte(nil), good...)
	opcode[2] |= 2 << 3 // STATUS
	response := append([]byte(nil), good...)
	response[2] |= 0x80
	moreCounts := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(moreCounts[10:], 9) // 9 additional records that are not there
	noQuestion := append([]byte(nil), good[:12]...)
	binary.BigEndian.PutUint16(noQuestion[4:], 0)

	cases := []struct {
		name  string
		q     []byte
		rcode dnsmessage.RCode
		drop  bool
	}{
		{"oversized", oversized, dnsmessage.RCodeFormatError, false},
		{"truncated in the question", good[:len(good)-3], dnsmessage.RCodeFormatError, false},
		{"only a header", good[:12], dnsmessage.RCodeFormatError, false},
		{"no question", noQuestion, dnsmessage.RCodeFormatError, false},
		{"shorter than a header", good[:7], 0, true},
		{"empty", nil, 0, true},
		{"compression loop", loop, dnsmessage.RCodeFormatError, false},
		{"compression loop of two", loop2, dnsmessage.RCodeFormatError, false},
		{"two questions", two, dnsmessage.RCodeFormatError, false},
		{"an answer record", withAnswer, dnsmessage.RCodeFormatError, false},
		{"class CHAOS", chaos, dnsmessage.RCodeFormatError, false},
		{"opcode STATUS", opcode, dnsmessage.RCodeNotImplemented, false},
		{"records counted but absent", moreCounts, dnsmessage.RCodeFormatError, false},
		{"a response", response, 0, true},
	}
	for _, c := range cases {
		out := s.Handle(ctx, client, c.q, false)
		if c.drop {
			if out != nil {
				t.Errorf("%s: answered %x", c.name, out)
			}
			continue
		}
		p := parse(t, out)
		if p.h.RCode != c.rcode || p.h.ID != 0x1234 || !p.h.Response || len(p.answers) != 0 {
			t.Errorf("%s: %+v %v, want %v", c.name, p.h, p.answers, c.rcode)
		}
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("malformed queries made %d lookups", n)
	}
	if st := s.Stats(); st.FormErr != uint64(len(cases)-3) || st.Dropped != 3 {
		t.Errorf("stats %+v", st)
	}
}

// FuzzHandle: whatever the bytes, the handler answers with a message that
// parses, to the query's ID, as a response, or not at all; it looks up
// only names that a node can have, in lower case.
func FuzzHandle(f *testing.F) {
	for _, q := range [][]byte{
		query(f, 1, "n1.grid.", dnsmessage.TypeA, false),
		query(f, 2, "N1.GRID.", dnsmessage.TypeAAAA, true),
		query(f, 3, "nobody.grid.", dnsmessage.TypeA, false),
		query(f, 4, "example.org.", dnsmessage.TypeA, false),
		query(f, 5, ReverseName(n1v4), dnsmessage.TypePTR, false),
		query(f, 6, "grid.", dnsmessage.TypeSOA, true),
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1},
		{0x12, 0x34, 0x81, 0x00, 0, 1, 0, 0, 0, 0, 0, 0},
	} {
		f.Add(q)
	}
	d := testDirectory()
	s := testServer(f, d, func(c *Config) {
		c.ClientQueries, c.ClientLookups, c.Lookups = 1e9, 1e9, 1e9
	})
	f.Fuzz(func(t *testing.T, q []byte) {
		out := s.Handle(context.Background(), client, q, false)
		if out == nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("answer %x to %x does not parse: %v", out, q, err)
		}
		if !m.Header.Response || len(q) < 2 || m.Header.ID != binary.BigEndian.Uint16(q) || len(out) > udpAnswer {
			t.Fatalf("answer %+v (%d bytes) to %x", m.Header, len(out), q)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, n := range d.names {
			if !nodeName.MatchString(n) {
				t.Fatalf("looked up %q", n)
			}
		}
		d.names = d.names[:0]
	})
}

// BenchmarkHandleCached: a query answered from the cache (the cost of a
// program looping on a name).
func BenchmarkHandleCached(b *testing.B) {
	s := testServer(b, testDirectory(), func(c *Config) { c.ClientQueries = 1e9 })
	q := query(b, 1, "n1.grid.", dnsmessage.TypeA, false)
	ctx := context.Background()
	for b.Loop() {
		if s.Handle(ctx, client, q, false) == nil {
			b.Fatal("no answer")
		}
	}
}
