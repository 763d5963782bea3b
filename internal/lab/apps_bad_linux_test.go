package lab_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
)

// socksAsk greets the SOCKS server on desktop-pc without authentication,
// sends req and returns the connection and the reply code (or -1 when
// the server closed without a reply).
func (L *appsLab) socksAsk(t *testing.T, req []byte) (net.Conn, int) {
	t.Helper()
	c, err := labtest.Dial(L.desktop, "127.0.0.1:1080", "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	c.Write([]byte{5, 1, 0})
	var ch [2]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil || ch != [2]byte{5, 0} {
		t.Fatalf("method choice %v %v", ch, err)
	}
	c.Write(req)
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return c, -1
	}
	skip := map[byte]int{1: 4 + 2, 4: 16 + 2}[head[3]]
	if head[3] == 3 {
		var n [1]byte
		io.ReadFull(c, n[:])
		skip = int(n[0]) + 2
	}
	io.ReadFull(c, make([]byte, skip))
	c.SetDeadline(time.Time{})
	return c, int(head[1])
}

func connectReq(host string, port uint16) []byte {
	b := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	return binary.BigEndian.AppendUint16(b, port)
}

// badInput: malformed requests, unknown names, closed ports, ordinary
// hosts without an exit and a peer that vanishes each get their reply
// code or a clean close, while a stalled client hangs on, and the server
// goes on serving.
func (L *appsLab) badInput(t *testing.T, ctx context.Context, socksProc *proc) {
	stalled, err := labtest.Dial(L.desktop, "127.0.0.1:1080", "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalled.Write([]byte{5, 2}) // a greeting cut short

	// a hold server on hiroshi-n1: greets its one client, then waits.
	hold := startIn(t, L.hiroshi, "hold-server", python, "-c",
		"import socket,time\ns=socket.create_server(('127.0.0.1',8100))\nc,_=s.accept()\nc.sendall(b'hi\\n')\ntime.sleep(600)")
	ex := startIn(t, L.hiroshi, "expose-hold", L.bin, "expose", "8100")
	ex.waitLog(t, "reachable as hiroshi-n1:8100", 10*time.Second)

	// not SOCKS5 at all: closed without a reply.
	c, err := labtest.Dial(L.desktop, "127.0.0.1:1080", "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if len(b) > 0 || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("an HTTP request to the SOCKS port: got %q, %v; want the connection closed", b, err)
	}
	c.Close()

	for _, tc := range []struct {
		name string
		req  []byte
		want int
	}{
		{"address type 9", []byte{5, 1, 0, 9, 1, 2, 3, 4, 0, 80}, 0x08},
		{"UDP ASSOCIATE", append([]byte{5, 3, 0, 1, 0, 0, 0, 0}, 0, 0), 0x07},
		{"reserved byte set", []byte{5, 1, 1, 1, 10, 0, 0, 1, 0, 80}, 0x01},
		{"unknown overlay name", connectReq("nosuchnode.grid", 22), 0x04},
		{"bad overlay name", connectReq("no$such.grid", 22), 0x04},
		{"nothing listens there", connectReq("hiroshi-n1.grid", 8199), 0x05},
		{"ordinary host, no exit", connectReq("example.org", 80), 0x02},
	} {
		c, rep := L.socksAsk(t, tc.req)
		c.Close()
		if rep != tc.want {
			t.Errorf("%s: reply %#x, want %#x", tc.name, rep, tc.want)
		}
	}

	// a good client is served while the stalled one hangs on.
	c, rep := L.socksAsk(t, connectReq("hiroshi-n1.grid", 8100))
	if rep != 0 {
		t.Fatalf("CONNECT hiroshi-n1.grid:8100: reply %#x\n%s", rep, socksProc.output())
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	hi := make([]byte, 3)
	if _, err := io.ReadFull(c, hi); err != nil || string(hi) != "hi\n" {
		t.Fatalf("from the hold server: %q %v", hi, err)
	}
	// the peer vanishes: the client sees its connection end.
	hold.stop()
	start := time.Now()
	if n, err := c.Read(make([]byte, 1)); n != 0 || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("after the peer vanished: read %d, %v", n, err)
	}
	t.Logf("the vanished peer's end reached the client in %v", time.Since(start).Round(time.Millisecond))
	// its exposure ends too: refused, with the right code.
	ex.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, rep := L.socksAsk(t, connectReq("hiroshi-n1.grid", 8100))
		c.Close()
		if rep == 0x05 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CONNECT to an exposure that ended: reply %#x, want 0x05", rep)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// and the server still answers.
	c2, rep := L.socksAsk(t, connectReq("nosuchnode.grid", 1))
	c2.Close()
	if rep != 0x04 {
		t.Fatalf("after all that: reply %#x", rep)
	}
}
