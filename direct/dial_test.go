package direct

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
)

func TestDialAccept(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.2"})
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
		_, _ = c.Write([]byte("hello"))
	}()
	d := &Dialer{Creds: cli, Local: noLocal}
	c, err := d.Dial(context.Background(), l.Machine(srv.Key.ID(), "srv"), "port-7000")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Peer != srv.Key.ID() || c.Request != "port-7000" || c.Via != addrOf(l).String() {
		t.Errorf("dialler's conn: peer %s request %q via %s", c.Peer.Short(), c.Request, c.Via)
	}
	if len(c.Attempts) != 1 || c.Attempts[0].Err != nil || c.Attempts[0].Via != c.Via {
		t.Errorf("attempts %v", c.Attempts)
	}
	s := <-accepted
	defer s.Close()
	if s.Peer != cli.Key.ID() || s.Request != "port-7000" || s.Via != c.LocalAddr().String() || s.Attempts != nil {
		t.Errorf("listener's conn: peer %s request %q via %s", s.Peer.Short(), s.Request, s.Via)
	}
	b := make([]byte, 5)
	if _, err := c.Read(b); err != nil || string(b) != "hello" {
		t.Errorf("read %q, %v", b, err)
	}
	if st := l.Stats(); st != (Stats{Accepted: 1}) {
		t.Errorf("stats %+v", st)
	}
	// An empty request and a zero target ID (anyone) work too.
	go echo(l)
	c2, err := d.Dial(context.Background(), identity.Machine{Addrs: []netip.AddrPort{addrOf(l)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c2)
	if c2.Peer != srv.Key.ID() || c2.Request != "" {
		t.Errorf("anyone: peer %s request %q", c2.Peer.Short(), c2.Request)
	}
	// Requests are visible ASCII.
	for _, bad := range []string{"a b", "x\n", strings.Repeat("x", MaxRequest+1)} {
		if _, err := d.Dial(context.Background(), l.Machine(srv.Key.ID(), "srv"), bad); err == nil {
			t.Errorf("request %q accepted", bad)
		}
	}
}

// A blackholed first candidate (TCP connects, TLS never answers) delays
// success by about one Stagger, not by the attempt timeout.
func TestDialBlackholed(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.3"})
	go echo(l)
	hole := blackhole(t, "127.0.0.2")
	const stagger = 100 * time.Millisecond
	d := &Dialer{Creds: cli, Local: noLocal, Stagger: stagger, Timeout: 10 * time.Second}
	target := identity.Machine{ID: srv.Key.ID(), Name: "srv", Addrs: []netip.AddrPort{hole, addrOf(l)}}
	start := time.Now()
	c, err := d.Dial(context.Background(), target, "")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	t.Logf("connected in %v with the first candidate blackholed (stagger %v); attempts %v", took, stagger, c.Attempts)
	if c.Via != addrOf(l).String() {
		t.Errorf("won via %s", c.Via)
	}
	if took < stagger || took > stagger+2*time.Second {
		t.Errorf("took %v: want about the stagger %v, far below the timeout", took, stagger)
	}
	if len(c.Attempts) != 2 || !errors.Is(c.Attempts[0].Err, errLost) || c.Attempts[1].Start < stagger {
		t.Errorf("attempts %v", c.Attempts)
	}
	// Two in a row: the blackholed one is abandoned each time, nothing leaks.
	c2, err := d.Dial(context.Background(), target, "")
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
}

// A wrong machine at the first address fails that attempt and starts the
// next at once, without waiting for the stagger.
func TestDialWrongMachineThenRight(t *testing.T) {
	other, srv, cli := testCreds(t, 1), testCreds(t, 2), testCreds(t, 3)
	wrong := testListen(t, ListenConfig{Creds: other, Addr: "127.0.0.2"})
	right := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.3"})
	go echo(wrong)
	go echo(right)
	d := &Dialer{Creds: cli, Local: noLocal, Stagger: 5 * time.Second}
	target := identity.Machine{ID: srv.Key.ID(), Name: "srv", Addrs: []netip.AddrPort{addrOf(wrong), addrOf(right)}}
	start := time.Now()
	c, err := d.Dial(context.Background(), target, "x")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c)
	if c.Via != addrOf(right).String() || c.Peer != srv.Key.ID() {
		t.Errorf("won via %s, peer %s", c.Via, c.Peer.Short())
	}
	if took > 2*time.Second {
		t.Errorf("took %v: the second attempt waited for the stagger", took)
	}
	var pe *pki.PeerError
	if len(c.Attempts) != 2 || !errors.As(c.Attempts[0].Err, &pe) || pe.Got != other.Key.ID() || pe.Want != srv.Key.ID() {
		t.Fatalf("attempts %v", c.Attempts)
	}
	t.Logf("took %v; trace %v", took, c.Attempts)
	// The next dial to the same target starts with what won.
	c2, err := d.Dial(context.Background(), target, "x")
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if len(c2.Attempts) != 1 || c2.Attempts[0].Via != addrOf(right).String() {
		t.Errorf("second dial: attempts %v, want only %s", c2.Attempts, addrOf(right))
	}
	// With only the wrong machine, the error says so.
	target.Addrs = target.Addrs[:1]
	_, err = d.Dial(context.Background(), target, "x")
	if !errors.Is(err, pki.ErrWrongPeer) || !strings.Contains(err.Error(), addrOf(wrong).String()+": reached the wrong machine: expected "+srv.Key.ID().Short()+", found "+other.Key.ID().Short()) {
		t.Errorf("wrong machine only: %v", err)
	}
}

// When every address fails, one error names each with its reason.
func TestDialAllFail(t *testing.T) {
	other, srv, cli := testCreds(t, 1), testCreds(t, 2), testCreds(t, 3)
	wrong := testListen(t, ListenConfig{Creds: other, Addr: "127.0.0.4"})
	go echo(wrong)
	closed := []netip.AddrPort{closedPort(t, "127.0.0.2"), closedPort(t, "127.0.0.3")}
	hole := blackhole(t, "127.0.0.5")
	d := &Dialer{Creds: cli, Local: noLocal, Stagger: 10 * time.Millisecond, Timeout: 300 * time.Millisecond}
	target := identity.Machine{ID: srv.Key.ID(), Name: "srv", Addrs: append(closed, addrOf(wrong), hole)}
	_, err := d.Dial(context.Background(), target, "")
	var de *DialError
	if !errors.As(err, &de) || len(de.Attempts) != 4 {
		t.Fatalf("error %v", err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{
		"direct: dial srv (" + srv.Key.ID().Short() + ")",
		closed[0].String() + ": tcp connect: connection refused",
		closed[1].String() + ": tcp connect: connection refused",
		addrOf(wrong).String() + ": reached the wrong machine",
		hole.String() + ": tls handshake: timed out after 300ms",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, pki.ErrWrongPeer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is fails on %v", err)
	}
	// All refused.
	target.Addrs = closed
	_, err = d.Dial(context.Background(), target, "")
	if !errors.As(err, &de) || len(de.Attempts) != 2 || strings.Count(err.Error(), "connection refused") != 2 {
		t.Errorf("all refused: %v", err)
	}
	// No addresses.
	if _, err := d.Dial(context.Background(), identity.Machine{ID: srv.Key.ID(), Name: "srv"}, ""); err == nil || !strings.Contains(err.Error(), "no addresses") {
		t.Errorf("no addresses: %v", err)
	}
	// The caller's context ends the dial and is named.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d.Timeout = 10 * time.Second
	_, err = d.Dial(ctx, identity.Machine{ID: srv.Key.ID(), Addrs: []netip.AddrPort{hole}}, "")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &de) || de.Err == nil {
		t.Errorf("context: %v", err)
	}
}

// The listener refuses within the handshake and the dialler gets the reason.
func TestDialRefused(t *testing.T) {
	srv, cli, stranger := testCreds(t, 1), testCreds(t, 2), testCreds(t, 3)
	var checked atomic.Value
	cfg := ListenConfig{
		Creds: srv,
		Accept: func(id identity.ID) error {
			if id == stranger.Key.ID() {
				return errors.New("not a member of this job")
			}
			return nil
		},
		Check: func(peer identity.ID, request string) error {
			checked.Store(peer)
			if request != "open" {
				return errors.New("port " + request + " is closed")
			}
			return nil
		},
	}
	cfg.Addr = "127.0.0.2"
	l1 := testListen(t, cfg)
	cfg.Addr = "127.0.0.3"
	l2 := testListen(t, cfg)
	go echo(l1)
	go echo(l2)
	target := identity.Machine{ID: srv.Key.ID(), Name: "srv", Addrs: []netip.AddrPort{addrOf(l1), addrOf(l2)}}
	d := &Dialer{Creds: cli, Local: noLocal, Stagger: time.Second}

	c, err := d.Dial(context.Background(), target, "open")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	c.Close()
	if got, _ := checked.Load().(identity.ID); got != cli.Key.ID() {
		t.Errorf("Check saw peer %s, want the dialler %s", got.Short(), cli.Key.ID().Short())
	}

	start := time.Now()
	_, err = d.Dial(context.Background(), target, "secret")
	var re *RefusedError
	var de *DialError
	if !errors.Is(err, ErrRefused) || !errors.As(err, &re) || re.Reason != "port secret is closed" || re.Peer != srv.Key.ID() || re.Request != "secret" {
		t.Fatalf("refused: %v", err)
	}
	// A refusal comes from the target itself: the other address is not tried.
	if !errors.As(err, &de) || len(de.Attempts) != 1 || len(de.NotTried) != 1 || de.Refused() != re || time.Since(start) > 900*time.Millisecond {
		t.Errorf("refusal did not end the dial: %v", err)
	}
	if !strings.Contains(err.Error(), `refused by the listener `+srv.Key.ID().Short()+` (request "secret"): port secret is closed`) {
		t.Errorf("message %q", err)
	}

	_, err = (&Dialer{Creds: stranger, Local: noLocal}).Dial(context.Background(), target, "open")
	if !errors.As(err, &re) || re.Reason != "not a member of this job" {
		t.Errorf("stranger: %v", err)
	}
	if st := l1.Stats(); st.Refused != 2 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A dialler must prove the ID it claims in the ClientHello.
func TestDialImpostor(t *testing.T) {
	srv, victim, impostor := testCreds(t, 1), testCreds(t, 2), testCreds(t, 3)
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.2", Accept: func(id identity.ID) error {
		if id != victim.Key.ID() {
			return errors.New("only the victim may connect")
		}
		return nil
	}})
	go echo(l)
	cert, err := certificate(impostor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(cert)
	cfg.ServerName = victim.Key.ID().String() // the lie
	cfg.NextProtos = []string{pki.ALPN, RefusedALPN}
	raw, err := net.Dial("tcp4", addrOf(l).String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cfg)
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	err = tc.Handshake()
	if err == nil {
		// TLS 1.3: the client finishes first; the listener's verdict
		// arrives as an alert on the first read.
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil {
		t.Fatal("impostor got through")
	}
	testwait.Until(t, "the failed handshake counted", 5*time.Second, func() bool { return l.Stats().Failed != 0 })
	if st := l.Stats(); st != (Stats{Failed: 1}) {
		t.Errorf("stats %+v (err %v)", st, err)
	}
}

// Dial with an empty request reaches a plain pki listener (a hub).
func TestDialPKIServer(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer raw.Close()
		tc, err := srv.Server(context.Background(), raw, nil)
		if err == nil && tc.Peer.ID != cli.Key.ID() {
			err = errors.New("wrong client " + tc.Peer.ID.Short())
		}
		if err == nil {
			_, err = tc.Write([]byte("x"))
		}
		done <- err
	}()
	d := &Dialer{Creds: cli, Local: noLocal}
	c, err := d.Dial(context.Background(), identity.Machine{ID: srv.Key.ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort(ln.Addr().String())}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A request needs a direct listener: a pki one does not speak it.
	go func() {
		raw, err := ln.Accept()
		if err == nil {
			_, _ = srv.Server(context.Background(), raw, nil)
			raw.Close()
		}
	}()
	_, err = d.Dial(context.Background(), identity.Machine{ID: srv.Key.ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort(ln.Addr().String())}}, "port")
	if err == nil || !strings.Contains(err.Error(), "tls handshake") {
		t.Errorf("request to a pki listener: %v", err)
	}
}
