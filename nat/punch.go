package nat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Reservation holds a local TCP port for a splice: the peer must be told
// where to aim before the connection is made. While held, the port also
// listens, so that a peer's SYN arriving before our own goes out (no NAT
// on our side, or one that let it in) still makes the connection.
type Reservation struct {
	Addr netip.AddrPort
	ln   net.Listener
}

// ReservePort picks a free TCP port on ip and holds it. Punch binds it
// too (both set SO_REUSEADDR and SO_REUSEPORT).
func ReservePort(ip netip.Addr) (*Reservation, error) {
	lc := net.ListenConfig{Control: reuseControl}
	ln, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		return nil, fmt.Errorf("reserve a port for a splice: %w", err)
	}
	ap, _ := netip.ParseAddrPort(ln.Addr().String())
	return &Reservation{Addr: ap, ln: ln}, nil
}

// Close releases the port.
func (r *Reservation) Close() error { return r.ln.Close() }

// Punch makes one side of a TCP simultaneous open: it connects from the
// reserved port to each of remotes at once (the peer's predicted
// endpoints: distinct connections from one local port) while the peer
// connects the other way to this host's predicted external endpoint, so
// that each NAT or stateful firewall sees an outgoing connection and lets
// the other side's SYN in as its reply. A connection from one of remotes
// that the reservation accepts counts as well. A connect that the network
// refuses (see connectRetrying) is made again until ctx ends. It returns
// the first connection made, or an error once ctx ends; the reservation is
// closed either way.
func Punch(ctx context.Context, r *Reservation, remotes []netip.AddrPort) (net.Conn, error) {
	if len(remotes) == 0 {
		r.ln.Close()
		return nil, errors.New("splice: no endpoint to connect to")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		c   net.Conn
		err error
	}
	out := make(chan outcome, 1+len(remotes))
	from := func(ap netip.AddrPort) bool {
		for _, rm := range remotes {
			if ap.Addr().Unmap() == rm.Addr().Unmap() && ap.Port() == rm.Port() {
				return true
			}
		}
		return false
	}
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				out <- outcome{nil, err}
				return
			}
			if ap, _ := netip.ParseAddrPort(c.RemoteAddr().String()); from(ap) {
				out <- outcome{c, nil}
				return
			}
			c.Close() // someone else
		}
	}()
	for _, remote := range remotes {
		go func() {
			c, err := connectRetrying(ctx, r.Addr, remote)
			out <- outcome{c, err}
		}()
	}
	var errs []error
	var won net.Conn
	for i := 0; i < 1+len(remotes); i++ {
		var o outcome
		select {
		case o = <-out:
		case <-ctx.Done():
			r.ln.Close()
			o = <-out
		}
		switch {
		case o.err == nil && won == nil:
			won = o.c
			cancel()
			r.ln.Close()
		case o.err == nil:
			o.c.Close()
		case won == nil && !errors.Is(o.err, net.ErrClosed):
			errs = append(errs, o.err)
		}
	}
	r.ln.Close()
	if won != nil {
		return won, nil
	}
	if ctx.Err() != nil && len(errs) == 0 {
		errs = append(errs, ctx.Err())
	}
	return nil, fmt.Errorf("splice %s -> %v: %w", r.Addr, remotes, errors.Join(errs...))
}
