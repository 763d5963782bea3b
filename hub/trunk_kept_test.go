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
	sc.mu.Lock()
	fromKept := false
	for _, p := range sc.seen {
		fromKept = fromKept || p == &payload[0]
	}
	sc.mu.Unlock()
	if !fromKept {
		t.Fatal("the kept payload was not written from its own buffer")
	}
	l.Close(nil)
	body, payload = keptFrame(t, 2*KeepAbove)
	if l.SendKept(5, body, len(payload)) {
		t.Fatal("SendKept accepted on a closed trunk")
	}
}
