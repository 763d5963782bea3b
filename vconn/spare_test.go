package vconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/gridlink/gridlink/nat"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

func (n *Node) heldSpares() int {
	n.spares.mu.Lock()
	defer n.spares.mu.Unlock()
	return len(n.spares.held)
}

// After a direct connection, the next one to the same target uses a spare
// opened in the background; a spare carries refusals too, and a broken one
// costs only a fresh setup.
func TestSpare(t *testing.T) {
	a, b := testNode(t, "a", nil), testNode(t, "b", nil)
	serveEcho(t, b, 7)
	ctx := context.Background()
	dial := func(port uint16) (*Conn, error) { return a.DialMachine(ctx, b.Machine(), port) }

	c1, err := dial(7)
	if err != nil {
		t.Fatal(err)
	}
	if c1.Spare() || c1.Method() != Direct {
		t.Fatalf("first connection: spare %v, method %s", c1.Spare(), c1.Method())
	}
	echoCheck(t, c1, 100<<10)
	testwait.Until(t, "a keeps spares to b", 0, func() bool { return a.Spares() == sparesPerTarget && b.heldSpares() == sparesPerTarget })

	c2, err := dial(7)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Spare() || c2.Method() != Direct {
		t.Fatalf("second connection: spare %v, method %s", c2.Spare(), c2.Method())
	}
	echoCheck(t, c2, 100<<10)
	testwait.Until(t, "the spare is replaced", 0, func() bool { return a.Spares() == sparesPerTarget })

	// a port nobody listens on: refused through the spare.
	_, err = dial(8)
	if !errors.Is(err, direct.ErrRefused) || !strings.Contains(err.Error(), "no listener on port 8") {
		t.Fatalf("dial to a closed port through a spare: %v", err)
	}

	// a spare that broke at the far end: a fresh setup, no error.
	c3, err := dial(7) // a fresh one (the refusal used the spare up)...
	if err != nil {
		t.Fatal(err)
	}
	c3.Close()
	testwait.Until(t, "spares again", 0, func() bool { return a.Spares() == sparesPerTarget && b.heldSpares() == sparesPerTarget })
	b.spares.mu.Lock()
	for c := range b.spares.held {
		c.Close()
	}
	b.spares.mu.Unlock()
	c4, err := dial(7)
	if err != nil {
		t.Fatalf("dial after the spare broke: %v", err)
	}
	if c4.Spare() {
		t.Error("used a broken spare")
	}
	echoCheck(t, c4, 1000)
}

// Spares expire at both ends; a negative SpareTTL keeps none.
func TestSpareExpiry(t *testing.T) {
	ctx := context.Background()
	a, err := Start(ctx, Config{Name: "a", ListenAddr: "127.0.0.1", SpareTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	none, err := Start(ctx, Config{Name: "none", ListenAddr: "127.0.0.1", SpareTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	b := testNode(t, "b", nil)
	serveEcho(t, b, 7)
	for _, n := range []*Node{a, none} {
		c, err := n.DialMachine(ctx, b.Machine(), 7)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	testwait.Until(t, "a keeps a spare", 0, func() bool { return a.Spares() >= 1 })
	testwait.Until(t, "the spare expires at both ends", 0, func() bool { return a.Spares() == 0 && b.heldSpares() == 0 })
	if none.Spares() != 0 {
		t.Error("a node with SpareTTL < 0 keeps spares")
	}
}

func TestSpareMessages(t *testing.T) {
	if err := readSpareAnswer(bytes.NewReader([]byte{spareAccept})); err != nil {
		t.Errorf("accept: %v", err)
	}
	err := readSpareAnswer(bytes.NewReader(append([]byte{spareRefuse, 7}, "no\x00 way"...)))
	if !errors.Is(err, direct.ErrRefused) || !strings.HasSuffix(err.Error(), ": no way") {
		t.Errorf("refusal: %v", err)
	}
	for _, bad := range [][]byte{nil, {spareRefuse}, {spareRefuse, 9, 'x'}, {'?'}} {
		if err := readSpareAnswer(bytes.NewReader(bad)); !errors.Is(err, errSpareDead) {
			t.Errorf("answer %q: %v, want errSpareDead", bad, err)
		}
	}
	if p, err := readSpareAsk(bytes.NewReader([]byte{spareAsk, 0x1b, 0x58})); err != nil || p != 7000 {
		t.Errorf("ask: %d %v", p, err)
	}
	for _, bad := range [][]byte{{spareAsk, 0, 0}, {'X', 0, 7}, {spareAsk, 1}} {
		if _, err := readSpareAsk(bytes.NewReader(bad)); err == nil {
			t.Errorf("ask %q accepted", bad)
		}
	}
}

func FuzzSpareMessages(f *testing.F) {
	f.Add([]byte{spareAccept})
	f.Add(append([]byte{spareRefuse, 4}, "nope"...))
	f.Add([]byte{spareAsk, 0, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		err := readSpareAnswer(bytes.NewReader(b))
		if err != nil && !errors.Is(err, errSpareDead) && !errors.Is(err, direct.ErrRefused) {
			t.Fatalf("answer error %v is neither dead nor refused", err)
		}
		if p, err := readSpareAsk(bytes.NewReader(b)); err == nil && p == 0 {
			t.Fatal("port 0 accepted")
		}
	})
}

// Back-to-back dials race the spare on its way against fresh setups: every
// one works, and no more than sparesPerTarget are ever kept or held.
func TestSpareBackToBack(t *testing.T) {
	a, b := testNode(t, "a", nil), testNode(t, "b", nil)
	serveEcho(t, b, 7)
	spared := 0
	for i := 0; i < 30; i++ {
		c, err := a.DialMachine(context.Background(), b.Machine(), 7)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		if c.Spare() {
			spared++
		}
		echoCheck(t, c, 10)
		if n, h := a.Spares(), b.heldSpares(); n > sparesPerTarget || h > sparesPerTarget+1 { // held: the kept ones and one on its way to being used
			t.Fatalf("dial %d: %d spares kept, %d held", i, n, h)
		}
	}
	t.Logf("%d of 30 dials used a spare", spared)
	if spared == 0 {
		t.Error("no dial used a spare")
	}
}

// After a reverse or spliced connection, the next setups by that method
// take a spare set up in advance (pre-arranged: the target called back or
// spliced it, and holds it), which asks only for the port; the acceptor
// gets it as a connection by that method; a spare carries refusals too;
// no virtual port is wire.SparePort.
func TestSlowMethodSpares(t *testing.T) {
	h := testHub(t, "site")
	for _, m := range []Method{Reverse, Splice} {
		t.Run(string(m), func(t *testing.T) {
			a := testNode(t, "a-"+string(m), h, m)
			b := testNode(t, "b-"+string(m), h, m)
			l, err := b.Listen(7000)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			methods := make(chan Method, 8)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					methods <- c.(*Conn).Method()
					go func() { defer c.Close(); _, _ = io.Copy(c, c); c.(*Conn).CloseWrite() }()
				}
			}()
			waitResolvable(t, a, b.Name())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			dial := func(port uint16) (*Conn, error) { return a.Dial(ctx, fmt.Sprintf("%s:%d", b.Name(), port)) }

			c1, err := dial(7000)
			if err != nil {
				t.Fatal(err)
			}
			if c1.Spare() || c1.Method() != m {
				t.Fatalf("first connection: spare %v, method %s", c1.Spare(), c1.Method())
			}
			echoCheck(t, c1, 100<<10)
			if got := <-methods; got != m {
				t.Errorf("the acceptor got a %s connection, want %s", got, m)
			}
			testwait.Until(t, "a keeps "+string(m)+" spares to b", 0, func() bool {
				return a.Spares() == sparesPerTarget && b.heldSpares() == sparesPerTarget
			})

			c2, err := dial(7000)
			if err != nil {
				t.Fatal(err)
			}
			if !c2.Spare() || c2.Method() != m {
				t.Fatalf("second connection: spare %v, method %s", c2.Spare(), c2.Method())
			}
			echoCheck(t, c2, 100<<10)
			if got := <-methods; got != m {
				t.Errorf("the acceptor got the spare as a %s connection, want %s", got, m)
			}

			testwait.Until(t, "the spare is replaced", 0, func() bool { return a.Spares() == sparesPerTarget })
			_, err = dial(8)
			if !errors.Is(err, direct.ErrRefused) || !strings.Contains(err.Error(), "no listener on port 8") {
				t.Fatalf("dial to a closed port through a %s spare: %v", m, err)
			}
		})
	}
	n := testNode(t, "c", nil)
	if _, err := n.Listen(wire.SparePort); err == nil {
		t.Errorf("listening on port %d, which names a spare", wire.SparePort)
	}
}

// A node behind a sequential NAT sets up no spliced spares: a splice in
// the background would take the port its next splice predicts. Behind a
// port-preserving NAT it does.
func TestNoSplicedSparesBehindSequentialNAT(t *testing.T) {
	h := testHub(t, "site")
	for _, tc := range []struct {
		alloc nat.Allocation
		want  int
	}{{nat.Sequential, 0}, {nat.Preserving, 1}} {
		a := testNode(t, "a-"+tc.alloc.String(), h, Splice)
		b := testNode(t, "b-"+tc.alloc.String(), h, Splice)
		a.self.mu.Lock()
		a.self.nat.class = nat.Class{Allocation: tc.alloc, Delta: 1}
		a.self.mu.Unlock()
		a.refillSpare(b.Machine(), Splice)
		a.spares.mu.Lock()
		got := a.spares.inflight
		a.spares.mu.Unlock()
		if got != tc.want {
			t.Errorf("behind a %s NAT: %d spliced spares set up, want %d", tc.alloc, got, tc.want)
		}
	}
}
