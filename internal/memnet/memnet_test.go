package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// A stream carries bytes both ways, ends with EOF after a close, and a
// dial where nothing listens is refused, as on loopback TCP.
func TestStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n Network
		l, err := n.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Listen(l.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("second listen on %s: %v", l.Addr(), err)
		}
		go func() {
			s, err := l.Accept()
			if err != nil {
				return
			}
			io.Copy(s, s)
			s.Close()
		}()
		c, err := n.Dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if ra, ok := c.RemoteAddr().(*net.TCPAddr); !ok || ra.String() != l.Addr().String() {
			t.Errorf("remote address %v, want %v", c.RemoteAddr(), l.Addr())
		}
		big := make([]byte, 3*window) // more than a window: Write waits for the reader
		for i := range big {
			big[i] = byte(i)
		}
		go func() { c.Write(big); c.(*Conn).CloseWrite() }()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != string(big) {
			t.Fatalf("echo: %d bytes, %v", len(got), err)
		}
		c.Close()
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("write after Close: %v", err)
		}
		l.Close()
		if _, err := n.Dial(context.Background(), l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial after the listener closed: %v", err)
		}
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("accept after Close: %v", err)
		}
	})
}

// Deadlines end a waiting Read at exactly their time, can be lifted and
// set again, and a write to a closed peer fails.
func TestDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(mustAP("10.0.0.1:1"), mustAP("10.0.0.2:2"))
		start := time.Now()
		a.SetReadDeadline(start.Add(time.Second))
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("read past the deadline: %v after %v", err, time.Since(start))
		}
		a.SetReadDeadline(time.Time{})
		go func() {
			time.Sleep(time.Second)
			b.Write([]byte("y"))
		}()
		if _, err := a.Read(make([]byte, 1)); err != nil || time.Since(start) != 2*time.Second {
			t.Errorf("read without a deadline: %v after %v", err, time.Since(start))
		}
		// a deadline set while a Read waits ends it
		go func() {
			time.Sleep(time.Second)
			a.SetReadDeadline(time.Now())
		}()
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Errorf("read ended by a deadline set meanwhile: %v after %v", err, time.Since(start))
		}
		a.SetReadDeadline(time.Time{})
		b.Close()
		if _, err := a.Write([]byte("z")); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("write to a closed peer: %v", err)
		}
		if _, err := a.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("read from a closed peer: %v", err)
		}
	})
}

func mustAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
