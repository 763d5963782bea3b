package nat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// Observe makes one connection to the hub at observer and asks it where
// the connection comes from (wire.ObserveRequest): one observation of
// this host's NAT. dial makes the TCP connection (nil: a net.Dialer's).
func Observe(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), observer netip.AddrPort) (Observation, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	at := time.Now()
	c, err := dial(ctx, "tcp", observer.String())
	if err != nil {
		return Observation{}, fmt.Errorf("observe at %s: %w", observer, err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := io.WriteString(c, wire.ObserveRequest); err != nil {
		return Observation{}, fmt.Errorf("observe at %s: %w", observer, err)
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, wire.MaxObserved), wire.MaxObserved).ReadSlice('\n')
	if err != nil {
		return Observation{}, fmt.Errorf("observe at %s: no answer: %w", observer, err)
	}
	ext, err := wire.ParseObserved(line)
	if err != nil {
		return Observation{}, fmt.Errorf("observe at %s: %w", observer, err)
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	return Observation{Local: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), External: ext, Observer: observer.String(), At: at}, nil
}
