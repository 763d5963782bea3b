package portmap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	natpmp "github.com/jackpal/go-nat-pmp"
)

// natpmpPort is where NAT-PMP servers listen (RFC 6886 §3).
const natpmpPort = 5351

// natpmpClient maps ports by NAT-PMP (github.com/jackpal/go-nat-pmp, whose
// client retransmits from 250 ms on, doubling, until the timeout).
type natpmpClient struct {
	gw      netip.Addr
	laddr   netip.Addr
	timeout time.Duration
	c       *natpmp.Client
}

// discoverNATPMP asks the gateway for its external address: a gateway that
// answers speaks NAT-PMP.
func discoverNATPMP(ctx context.Context, cfg Config) (client, error) {
	gw := cfg.Gateway
	if !gw.IsValid() {
		var err error
		if gw, err = DefaultGateway(); err != nil {
			return nil, fmt.Errorf("NAT-PMP: %w (give Config.Gateway)", err)
		}
	}
	if !gw.Is4() {
		return nil, fmt.Errorf("NAT-PMP gateway %s: not an IPv4 address", gw)
	}
	n := &natpmpClient{gw: gw, timeout: cfg.timeout(), c: natpmp.NewClientWithTimeout(gw.AsSlice(), cfg.timeout())}
	// the local address a datagram to the gateway leaves from; connecting
	// a UDP socket sends nothing.
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(gw, natpmpPort)))
	if err != nil {
		return nil, n.explain(err)
	}
	n.laddr = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	c.Close()
	if _, err := n.external(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *natpmpClient) protocol() Protocol { return NATPMP }
func (n *natpmpClient) gateway() string    { return n.gw.String() }
func (n *natpmpClient) local() netip.Addr  { return n.laddr }

// external asks for the gateway's external address.
func (n *natpmpClient) external(ctx context.Context) (netip.Addr, error) {
	r, err := callCtx(ctx, n.timeout, n.c.GetExternalAddress)
	if err != nil {
		return netip.Addr{}, n.explain(err)
	}
	a := netip.AddrFrom4(r.ExternalIPAddress)
	if a.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("NAT-PMP gateway %s: it has no external address", n.gw)
	}
	return a, nil
}

func (n *natpmpClient) add(ctx context.Context, internal, ext uint16, lifetime time.Duration) (grant, error) {
	r, err := callCtx(ctx, n.timeout, func() (*natpmp.AddPortMappingResult, error) {
		return n.c.AddPortMapping("tcp", int(internal), int(ext), int(lifetime/time.Second))
	})
	if err != nil {
		return grant{}, n.explain(err)
	}
	if r.InternalPort != internal || r.MappedExternalPort == 0 || r.PortMappingLifetimeInSeconds == 0 {
		return grant{}, fmt.Errorf("NAT-PMP gateway %s: answered a mapping of tcp port %d with port %d -> %d for %d s",
			n.gw, internal, r.MappedExternalPort, r.InternalPort, r.PortMappingLifetimeInSeconds)
	}
	ip, err := n.external(ctx)
	if err != nil {
		return grant{}, err
	}
	return grant{
		external: netip.AddrPortFrom(ip, r.MappedExternalPort),
		lifetime: time.Duration(r.PortMappingLifetimeInSeconds) * time.Second,
	}, nil
}

// remove deletes the mapping: a request with lifetime 0 and external port
// 0 (RFC 6886 §3.4).
func (n *natpmpClient) remove(ctx context.Context, internal, _ uint16) error {
	_, err := callCtx(ctx, n.timeout, func() (*natpmp.AddPortMappingResult, error) {
		return n.c.AddPortMapping("tcp", int(internal), 0, 0)
	})
	if err != nil {
		return n.explain(err)
	}
	return nil
}

// explain names the gateway and says in words what common failures mean.
func (n *natpmpClient) explain(err error) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		err = explained{fmt.Sprintf("nothing listens on udp/%d (port unreachable)", natpmpPort), err}
	case errors.Is(err, errNoAnswer):
		err = explained{fmt.Sprintf("no answer within %v", n.timeout), err}
	}
	return fmt.Errorf("NAT-PMP gateway %s: %w", n.gw, err)
}

// explained is an error said in words, wrapping the original.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }

// errNoAnswer marks a call that ran out the library's timeout without an
// answer: the library says so only in words (its error has no type), so
// callCtx tells it by what it measured, the call's duration.
var errNoAnswer = errors.New("no answer")

// callCtx runs f, returning early when ctx ends (f then finishes on its
// own: the NAT-PMP library's calls end at their timeout). An error that
// is not a network error's, of a call that lasted the timeout, wraps
// errNoAnswer.
func callCtx[T any](ctx context.Context, timeout time.Duration, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		v, err := f()
		var ne net.Error
		if err != nil && time.Since(start) >= timeout && !errors.As(err, &ne) {
			err = fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
