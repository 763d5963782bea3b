package hubserver

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// A hub tells a connection that asks where it comes from, and still serves
// links on the same port; a garbage preamble is logged and dropped.
func TestObserve(t *testing.T) {
	h, logs := loggedHub(t)

	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", h.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, wire.ObserveRequest); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.ParseObserved(line)
		if want := c.LocalAddr().(*net.TCPAddr).AddrPort(); err != nil || got != netip.AddrPortFrom(want.Addr().Unmap(), want.Port()) {
			t.Fatalf("observed %v (%v), want %v", got, err, want)
		}
		c.Close()
	}
	c, err := net.Dial("tcp", h.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	closedByHub(t, c)
	testwait.Until(t, "the hub to log the garbage", 5*time.Second, func() bool {
		return logs.has("neither a TLS handshake nor an observation request")
	})
	// links still work on the same port.
	n1 := attachNode(t, "n1", h.Addr().String())
	if _, err := n1.Lookup(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
}

// A node learns every hub its hub can reach, its own first.
func TestHubList(t *testing.T) {
	g, a, b, c := line(t)
	n := g.node("n", "a")
	testwait.Until(t, "a hub list with all three", 10*time.Second, func() bool {
		hubs, err := n.Hubs(context.Background())
		return err == nil && len(hubs) == 3
	})
	hubs, _ := n.Hubs(context.Background())
	if hubs[0].Hub != a.ID() || hubs[0].Hops != 0 || len(hubs[0].Addrs) == 0 {
		t.Errorf("first hub %+v, want a itself with its addresses", hubs[0])
	}
	seen := map[string]bool{}
	for _, h := range hubs {
		seen[h.Name] = true
	}
	if !seen[b.name] || !seen[c.name] {
		t.Errorf("hub list %+v lacks b or c", hubs)
	}
}
