package vconn

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/internal/testwait"
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
