package hub

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/gridlink/gridlink/wire"
)

// seenConn records the first byte's address of every Write.
type seenConn struct {
	net.Conn
	mu   sync.Mutex
	seen []*byte
}

func (c *seenConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if len(p) > 0 {
		c.seen = append(c.seen, &p[0])
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// wrote says whether a Write began at b.
func (c *seenConn) wrote(b *byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.seen {
		if q == b {
			return true
		}
	}
	return false
}

// keptFrame reads an encoded data frame of n bytes and keeps its payload.
func keptFrame(t *testing.T, n int) (*[]byte, []byte) {
	f, err := wire.NewReader(bytes.NewReader(wire.Append(nil, wire.TData, 3, bytes.Repeat([]byte{9}, n)))).Read()
	if err != nil {
		t.Fatal(err)
	}
	body := f.Keep()
	if body == nil {
		t.Fatal("nothing to keep")
	}
	return body, f.Payload
}

// Frames sent with SendKept go out whole and in order with those sent
// by Send, and their payloads are written from the kept buffer itself,
// not from a copy; a closed trunk refuses them.
func TestTrunkSendKept(t *testing.T) {
	a, b := net.Pipe()
	sc := &seenConn{Conn: a}
	l := NewTrunk(sc, nil, "test", false)
	defer l.Close(nil)
	body, payload := keptFrame(t, 3*KeepAbove)
	small := []byte("small")
	l.Send(wire.TData, 0, 5, small)
	if !l.SendKept(5, body, len(payload)) {
		t.Fatal("SendKept refused on an open trunk")
	}
	l.Send(wire.TData, 0, 5, small)
	r := NewFrameReader(b)
	for i, w := range [][]byte{small, payload, small} {
		g, err := r.Read()
		if err != nil || g.Type != wire.TData || g.Circuit != 5 || !bytes.Equal(g.Payload, w) {
			t.Fatalf("frame %d: %v, %v; want %d bytes on circuit 5", i, g, err, len(w))
		}
	}
	if !sc.wrote(&payload[0]) {
		t.Fatal("the kept payload was not written from its own buffer")
	}
	l.Close(nil)
	body, payload = keptFrame(t, 2*KeepAbove)
	if l.SendKept(5, body, len(payload)) {
		t.Fatal("SendKept accepted on a closed trunk")
	}
}

// A payload sent by reference is written from the caller's buffer, and
// Released waits for that: while the peer has not read it the writer is
// not done with it; once read, Released returns; and a trunk that closes
// with such a payload still queued releases it too.
func TestTrunkSendRef(t *testing.T) {
	a, b := net.Pipe()
	sc := &seenConn{Conn: a}
	l := NewTrunk(sc, nil, "test", false)
	defer l.Close(nil)
	p := bytes.Repeat([]byte{7}, 2*KeepAbove)
	ref, ok := l.SendRef(5, p)
	if !ok || ref == 0 {
		t.Fatalf("SendRef on an open trunk: %d, %v", ref, ok)
	}
	l.qmu.Lock()
	early := l.freed >= ref
	l.qmu.Unlock()
	if early {
		t.Fatal("released before the peer read a byte")
	}
	g, err := NewFrameReader(b).Read()
	if err != nil || g.Circuit != 5 || !bytes.Equal(g.Payload, p) {
		t.Fatalf("read %v, %v", g, err)
	}
	l.Released(ref)
	if !sc.wrote(&p[0]) {
		t.Fatal("the payload was not written from the caller's buffer")
	}
	stuck, ok := l.SendRef(5, p) // b reads no more
	if !ok {
		t.Fatal("SendRef refused on an open trunk")
	}
	l.Close(nil)
	l.Released(stuck)
	if _, ok := l.SendRef(5, p); ok {
		t.Fatal("SendRef accepted on a closed trunk")
	}
}

// A circuit's large Write goes out from the application's buffer and
// returns only once the trunk is done with it: the buffer is the
// caller's again (the race detector watches the overwrite below).
func TestCircuitWriteNoCopy(t *testing.T) {
	a, b := net.Pipe()
	sc := &seenConn{Conn: a}
	sl := &slink{circuits: map[uint32]*Circuit{}}
	sl.t = NewTrunk(sc, nil, "hub h", false)
	defer sl.t.Close(nil)
	c := newCircuit(sl, 3, false, Addr{}, Addr{})
	c.credit = 1 << 20
	p := make([]byte, 3*MaxData/2)
	for i := range p {
		p[i] = byte(i)
	}
	want := bytes.Clone(p)
	got := make(chan []byte, 1)
	go func() {
		r := NewFrameReader(b)
		var all []byte
		for len(all) < len(want) {
			f, err := r.Read()
			if err != nil {
				break
			}
			all = append(all, f.Payload...)
		}
		got <- all
	}()
	if n, err := c.Write(p); n != len(p) || err != nil {
		t.Fatalf("wrote %d, %v", n, err)
	}
	clear(p)
	if all := <-got; !bytes.Equal(all, want) {
		t.Fatalf("the peer got %d bytes, not what was written", len(all))
	}
	if !sc.wrote(&p[0]) {
		t.Fatal("the circuit's data was not written from the application's buffer")
	}
}
