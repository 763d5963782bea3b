package nat

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// loopbackPredict predicts 127.0.0.1 and the local port: no NAT.
func loopbackPredict(ctx context.Context, port uint16) ([]netip.AddrPort, bool, error) {
	return []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}, false, nil
}

// Offer and Answer, with their messages carried over channels, make one
// connection between them.
func TestOfferAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offers, replies, goes := make(chan []netip.AddrPort, 1), make(chan []netip.AddrPort, 1), make(chan struct{}, 1)
	type res struct {
		c   net.Conn
		err error
	}
	answered := make(chan res, 1)
	go func() {
		peer := <-offers
		c, err := Answer(ctx, time.Now(), peer, loopbackPredict,
			func(eps []netip.AddrPort, held time.Duration) error { replies <- eps; return nil },
			func(ctx context.Context) error { <-goes; return nil })
		answered <- res{c, err}
	}()
	c, err := Offer(ctx, loopbackPredict,
		func(eps []netip.AddrPort) error { offers <- eps; return nil },
		func(ctx context.Context) ([]netip.AddrPort, time.Duration, error) { return <-replies, 0, nil },
		func() error { goes <- struct{}{}; return nil })
	a := <-answered
	if err != nil || a.err != nil {
		t.Fatalf("offer: %v, answer: %v", err, a.err)
	}
	defer c.Close()
	defer a.c.Close()
	go c.Write([]byte("spliced"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(a.c, buf); err != nil || string(buf) != "spliced" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// An early answer (Reply.Early): the answering side connects half the
// offer's round-trip estimate after its reply, the offering side at once
// on the reply; neither sends nor waits for a go, and they connect.
func TestOfferAnswerEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offers, replies := make(chan []netip.AddrPort, 1), make(chan []netip.AddrPort, 1)
	type res struct {
		c   net.Conn
		err error
	}
	answered := make(chan res, 1)
	const rtt = 40 * time.Millisecond
	go func() {
		peer := <-offers
		c, err := AnswerEarly(ctx, time.Now(), peer, loopbackPredict,
			func(eps []netip.AddrPort, held time.Duration) error {
				go func() { time.Sleep(rtt / 2); replies <- eps }() // the reply's way back
				return nil
			}, rtt)
		answered <- res{c, err}
	}()
	c, err := OfferTimed(ctx, loopbackPredict,
		func(eps []netip.AddrPort) error { offers <- eps; return nil },
		func(ctx context.Context) (Reply, error) { return Reply{Peer: <-replies, Early: true}, nil },
		func() error { t.Error("an early offer sent go"); return nil })
	a := <-answered
	if err != nil || a.err != nil {
		t.Fatalf("offer: %v, answer: %v", err, a.err)
	}
	defer c.Close()
	defer a.c.Close()
	go c.Write([]byte("spliced"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(a.c, buf); err != nil || string(buf) != "spliced" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// A prediction that fails is ErrPredict; the messenger's own errors come
// back as they are; a peer that never connects is ErrPunch, in time.
func TestOfferErrors(t *testing.T) {
	ctx := context.Background()
	bad := func(ctx context.Context, port uint16) ([]netip.AddrPort, bool, error) {
		return nil, false, errors.New("random NAT")
	}
	nop := func([]netip.AddrPort) error { return nil }
	if _, err := Offer(ctx, bad, nop, nil, nil); !errors.Is(err, ErrPredict) {
		t.Errorf("failed prediction: %v", err)
	}
	refused := errors.New("refused by the peer")
	await := func(context.Context) ([]netip.AddrPort, time.Duration, error) { return nil, 0, refused }
	if _, err := Offer(ctx, loopbackPredict, nop, await, nil); !errors.Is(err, refused) {
		t.Errorf("refusal: %v", err)
	}
	nobody, _ := ReservePort(netip.MustParseAddr("127.0.0.1"))
	nobody.Close()
	silent := func(context.Context) ([]netip.AddrPort, time.Duration, error) {
		return []netip.AddrPort{nobody.Addr}, 0, nil
	}
	start := time.Now()
	_, err := Offer(ctx, loopbackPredict, nop, silent, func() error { return nil })
	if !errors.Is(err, ErrPunch) || time.Since(start) > 2*time.Second {
		t.Errorf("nobody there: %v after %v", err, time.Since(start))
	}
}
