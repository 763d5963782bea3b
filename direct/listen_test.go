package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// freeRun finds n consecutive free ports on host and returns the first.
func freeRun(t *testing.T, host string, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		base := 20000 + rand.IntN(30000)
		ok := true
		for p := base; p < base+n && ok; p++ {
			ln, err := net.Listen("tcp4", fmt.Sprintf("%s:%d", host, p))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

func TestListenPortRange(t *testing.T) {
	c := testCreds(t, 1)
	const host = "127.0.0.6"
	base := freeRun(t, host, 3)
	// Occupy the first two ports of the range.
	for p := base; p < base+2; p++ {
		ln, err := net.Listen("tcp4", fmt.Sprintf("%s:%d", host, p))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	r := PortRange{uint16(base), uint16(base + 2)}
	l, err := Listen(context.Background(), ListenConfig{Creds: c, Addr: host, Ports: r, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Port() != uint16(base+2) {
		t.Errorf("port %d, want %d (the first free one)", l.Port(), base+2)
	}
	// Now all are taken.
	_, err = Listen(context.Background(), ListenConfig{Creds: c, Addr: host, Ports: r})
	want := fmt.Sprintf("direct: listen on %s: every port in %d-%d is in use", host, base, base+2)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("all taken: %v; want %q", err, want)
	}
	// A single port (Hi 0), and bad ranges.
	l.Close()
	l2, err := Listen(context.Background(), ListenConfig{Creds: c, Addr: host, Ports: PortRange{Lo: uint16(base + 2)}, Logger: quiet})
	if err != nil || l2.Port() != uint16(base+2) {
		t.Fatalf("single port: %v", err)
	}
	l2.Close()
	for _, bad := range []PortRange{{Lo: 0, Hi: 5}, {Lo: 9, Hi: 5}} {
		if _, err := Listen(context.Background(), ListenConfig{Creds: c, Addr: host, Ports: bad}); err == nil || !strings.Contains(err.Error(), "bad port range") {
			t.Errorf("range %v: %v", bad, err)
		}
	}
	if _, err := Listen(context.Background(), ListenConfig{Addr: host}); err == nil {
		t.Error("listened without credentials")
	}
	if _, err := Listen(context.Background(), ListenConfig{Creds: c, Addr: "203.0.113.250", Ports: r}); err == nil || !strings.Contains(err.Error(), "assign requested address") {
		t.Errorf("foreign address: %v", err)
	}
}

// Garbage and silent clients do not hold up Accept; they are counted.
func TestListenGarbage(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.2", HandshakeTimeout: 300 * time.Millisecond})
	// A silent client: connects and says nothing.
	silent, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A web browser.
	junk, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	_, _ = io.WriteString(junk, "GET / HTTP/1.0\r\n\r\n")
	// A half ClientHello, then silence.
	half, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	_, _ = half.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})

	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	start := time.Now()
	d := &Dialer{Creds: cli, Local: noLocal}
	c, err := d.Dial(context.Background(), l.Machine(srv.Key.ID(), "srv"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("accepted after %v: held up by the bad clients", took)
	}
	testwait.Until(t, "3 failed handshakes", 5*time.Second, func() bool { return l.Stats().Failed >= 3 })
	if st := l.Stats(); st != (Stats{Accepted: 1, Failed: 3}) {
		t.Errorf("stats %+v", st)
	}
	// The silent client was cut off.
	_ = silent.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Errorf("silent client: %v", err)
	}
}

func TestListenClose(t *testing.T) {
	srv := testCreds(t, 1)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.2"})
	// A handshake in progress when the listener closes is aborted. (A
	// client that has sent nothing is not in one yet: the kernel holds it
	// until its first bytes, TCP_DEFER_ACCEPT.)
	silent, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if _, err := silent.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := l.Accept(); errc <- err }()
	time.Sleep(50 * time.Millisecond) // real sockets: the listener has taken the silent client into a handshake
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	_ = silent.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("pending handshake not aborted: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
