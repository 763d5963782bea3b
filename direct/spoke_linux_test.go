package direct

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"golang.org/x/sys/unix"
)

// queued is how many bytes wait in c's socket to be read.
func queued(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// WholeFirstMessage tells a whole first record or observation-like
// message in a socket from part of one, without consuming it.
func TestWholeFirstMessage(t *testing.T) {
	const other = "GRIDLINK-OBSERVE\n"
	record := append([]byte{recordHandshake, 3, 1, 0, 40}, make([]byte, 40)...)
	cases := []struct {
		name  string
		parts []string // written one after the other
		whole []bool   // after each part
	}{
		{"ClientHello", []string{string(record[:3]), string(record[3:20]), string(record[20:])}, []bool{false, false, true}},
		{"observation request", []string{other[:8], other[8:]}, []bool{false, true}},
		{"garbage", []string{"GET / HTTP/1.1\r\n\r\n"}, []bool{false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := tcpPair(t)
			if WholeFirstMessage(srv, other) {
				t.Fatal("nothing sent: whole")
			}
			sent := 0
			for i, p := range tc.parts {
				if _, err := cli.Write([]byte(p)); err != nil {
					t.Fatal(err)
				}
				sent += len(p)
				testwait.Until(t, "the bytes in the socket", 5*time.Second, func() bool { return queued(t, srv) == sent })
				if got := WholeFirstMessage(srv, other); got != tc.whole[i] {
					t.Fatalf("after %d bytes %q: whole %v, want %v", sent, strings.Join(tc.parts[:i+1], ""), got, tc.whole[i])
				}
			}
			if queued(t, srv) != sent {
				t.Fatalf("WholeFirstMessage consumed bytes: %d queued, %d sent", queued(t, srv), sent)
			}
		})
	}
	if a, b := net.Pipe(); WholeFirstMessage(a, other) {
		t.Error("a pipe: whole")
	} else {
		a.Close()
		b.Close()
	}
}

// A full gate turns away a newcomer that has been silent since it
// connected (it waited in the accept queue while the listener was busy)
// at once, with a reset the dialler reads, instead of admitting it and
// shedding an older one; one whose first message is in, and any while
// the gate has room, it admits.
func TestGateTurnsAwaySilent(t *testing.T) {
	g := &Gate{Max: 1, Spoke: func(c net.Conn) bool { return WholeFirstMessage(c, "") }}
	held, _ := tcpPair(t)
	if s := g.TurnAway(held); s != nil {
		t.Fatalf("the gate has room: turned away %+v", s)
	}
	g.Admit(held)
	stale := func(c net.Conn) func() bool {
		return func() bool { d, ok := SilentFor(c); return ok && d >= StaleAfter }
	}

	silent, silentCli := tcpPair(t)
	testwait.Until(t, "the newcomer silent for StaleAfter", 5*time.Second, stale(silent))
	s := g.TurnAway(silent)
	if s == nil || !strings.Contains(s.Reason, "turned away: silent for") {
		t.Fatalf("full gate, silent newcomer: %+v, want it turned away", s)
	}
	_ = silentCli.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silentCli.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the dialler of a turned-away connection read %v, want a reset", err)
	}

	spoken, spokenCli := tcpPair(t)
	if _, err := spokenCli.Write(append([]byte{recordHandshake, 3, 1, 0, 4}, 1, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the ClientHello in the socket", 5*time.Second, func() bool { return WholeFirstMessage(spoken, "") })
	testwait.Until(t, "the newcomer silent for StaleAfter", 5*time.Second, stale(spoken))
	if s := g.TurnAway(spoken); s != nil {
		t.Fatalf("full gate, the newcomer's ClientHello in: turned away %+v", s)
	}
	if g.Shed() != 1 || g.Len() != 1 {
		t.Errorf("shed %d, pending %d; want 1 and 1", g.Shed(), g.Len())
	}
}

// tcpPair is a connected pair over loopback: the accepted end, the dialled one.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close(); srv.Close() })
	return srv, cli
}
