package nat

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// Two sides punching toward each other's ports make one TCP connection:
// a simultaneous open, or (on loopback, where a SYN arrives before the
// other side's goes out) one side's reservation accepting the other.
func TestPunchSimultaneousOpen(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for i := 0; i < 5; i++ {
		ra, err := ReservePort(lo)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := ReservePort(lo)
		if err != nil {
			t.Fatal(err)
		}
		a, b := ra.Addr, rb.Addr
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		type res struct {
			c   net.Conn
			err error
		}
		other := make(chan res, 1)
		go func() { c, err := Punch(ctx, rb, []netip.AddrPort{a}); other <- res{c, err} }()
		ca, err := Punch(ctx, ra, []netip.AddrPort{b})
		r := <-other
		cancel()
		if err != nil || r.err != nil {
			t.Fatalf("punch: %v / %v", err, r.err)
		}
		if ca.LocalAddr().String() != a.String() || ca.RemoteAddr().String() != b.String() {
			t.Fatalf("connection %v -> %v, want %v -> %v", ca.LocalAddr(), ca.RemoteAddr(), a, b)
		}
		go io.WriteString(ca, "ping")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(r.c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q, %v", buf, err)
		}
		ca.Close()
		r.c.Close()
	}
}

// Punch fails, within its context, when nobody answers.
func TestPunchNobody(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	r, _ := ReservePort(lo)
	other, _ := ReservePort(lo)
	other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := Punch(ctx, r, []netip.AddrPort{other.Addr}); err == nil {
		t.Fatal("punch to a closed port succeeded")
	}
}

// Observe reads what the observer says and pairs it with the local port.
func TestObserve(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := []string{"", "OBSERVED 203.0.113.17:40001\n", "SEEN x\n"}
	go func() {
		for _, a := range answers {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			if line == wire.ObserveRequest {
				if a == "" {
					a = string(wire.AppendObserved(nil, netip.MustParseAddrPort(c.RemoteAddr().String())))
				}
				io.WriteString(c, a)
			}
			c.Close()
		}
	}()
	hub := netip.MustParseAddrPort(ln.Addr().String())
	o, err := Observe(context.Background(), nil, hub)
	if err != nil || o.External != o.Local || o.Observer != hub.String() {
		t.Fatalf("observation %+v, %v: want External == Local", o, err)
	}
	o, err = Observe(context.Background(), nil, hub)
	if err != nil || o.External.String() != "203.0.113.17:40001" {
		t.Fatalf("observation %+v, %v", o, err)
	}
	if _, err := Observe(context.Background(), nil, hub); err == nil {
		t.Fatal("a garbage answer was accepted")
	}
}

// A connect the network refuses (a reset: here, nothing listens yet, as
// when a rejecting NAT answers a SYN that came before its own end's) is
// made again within the deadline: Punch connects once the other end opens
// (issue 17: a splice gave up on the first reset from a NAT).
func TestPunchRetriesRefused(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	r, err := ReservePort(lo)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ReservePort(lo)
	if err != nil {
		t.Fatal(err)
	}
	peer := other.Addr
	other.Close() // refused until it listens again
	opened := make(chan net.Listener, 1)
	go func() {
		time.Sleep(30 * time.Millisecond) // real time: Punch retries real refused connects on loopback
		ln, err := net.Listen("tcp", peer.String())
		if err != nil {
			t.Error(err)
		}
		opened <- ln
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Punch(ctx, r, []netip.AddrPort{peer})
	if ln := <-opened; ln != nil {
		defer ln.Close()
	}
	if err != nil {
		t.Fatalf("punch to a port that listens after 30 ms: %v", err)
	}
	c.Close()
}

// A connect refused until the deadline says so, and how often.
func TestPunchRefusedUntilDeadline(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	r, _ := ReservePort(lo)
	other, _ := ReservePort(lo)
	other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Punch(ctx, r, []netip.AddrPort{other.Addr})
	var refused *RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, syscall.ECONNREFUSED) || refused.Tries < 2 || refused.Remote != other.Addr {
		t.Fatalf("punch to a closed port: %v; want a RefusedError for %v, refused more than once", err, other.Addr)
	}
}
