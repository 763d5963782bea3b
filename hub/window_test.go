package hub

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// A circuit's receive window grows, while its application keeps up, to
// at least the bandwidth-delay product of a 160 ms, 400 Mbit/s path
// (issue 20): one routed stream across such a path is not held back by
// flow control.
func TestWindowCoversLongPath(t *testing.T) {
	const rtt = 160 * time.Millisecond
	const bitsPerSecond = 400e6
	bdp := int64(bitsPerSecond / 8 * rtt.Seconds())
	a, b := net.Pipe()
	go io.Copy(io.Discard, b)
	defer a.Close()
	defer b.Close()
	sl := &slink{t: NewTrunk(a, nil, "test", false), circuits: map[uint32]*Circuit{}}
	defer sl.t.Close(nil)
	c := newCircuit(sl, 2, true, Addr{}, Addr{})
	c.established = true
	c.epoch = monotime()
	c.rtt = rtt // as its pings measured it
	buf := make([]byte, MaxData)
	for range 64 {
		// the sender fills the window granted so far; the application
		// reads it at once.
		for c.received < c.granted {
			n := min(int64(MaxData), c.granted-c.received)
			if err := c.onData(buf[:n], nil); err != nil {
				t.Fatal(err)
			}
		}
		for c.rbuf.Len() > 0 {
			if _, err := c.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
		if c.rwin == wire.MaxWindow {
			break
		}
	}
	if c.rwin < bdp {
		t.Fatalf("window %d bytes after the application kept up, want at least the path's bandwidth-delay product, %d", c.rwin, bdp)
	}
}
