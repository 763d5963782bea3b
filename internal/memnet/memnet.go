// Package memnet is an in-memory stream network for tests: listeners and
// connections that behave like loopback TCP (addresses are *net.TCPAddr,
// writes are buffered, deadlines work, Close and CloseWrite end the
// stream) but block only on channels, so code that uses them can run in
// a testing/synctest bubble, where time is synthetic.
//
// It leaves out everything a socket does beyond a byte stream: no socket
// options, no file descriptors, no packets (UDP), no loss or delay.
package memnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
)

// backlog is how many connections a listener queues before Dial waits.
const backlog = 128

// Network is a set of in-memory listeners, dialled by address. The zero
// value is ready to use; one Network per test (or per bubble).
type Network struct {
	mu        sync.Mutex
	listeners map[netip.AddrPort]*Listener
	next      uint16 // the last port handed out
}

// Listen listens on addr ("IP:PORT"; port 0 picks a free one).
func (n *Network) Listen(addr string) (*Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("memnet: listen %s: %w", addr, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = map[netip.AddrPort]*Listener{}
	}
	if ap.Port() == 0 {
		ap = netip.AddrPortFrom(ap.Addr(), n.port())
	}
	if n.listeners[ap] != nil {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	}
	l := &Listener{n: n, addr: ap, queue: make(chan *Conn, backlog), done: make(chan struct{})}
	n.listeners[ap] = l
	return l, nil
}

// port hands out the next free port (under n.mu).
func (n *Network) port() uint16 {
	for {
		n.next++
		if n.next < 20000 {
			n.next = 20000
		}
		free := true
		for ap := range n.listeners {
			free = free && ap.Port() != n.next
		}
		if free {
			return n.next
		}
	}
}

// Dial connects to the listener at addr ("IP:PORT"), or fails as a
// refused connect does when none listens there. The connection comes
// from addr's IP address, as one to a loopback address does.
func (n *Network) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return n.DialFrom(ctx, netip.Addr{}, addr)
}

// DialFrom is Dial from the IP address from (the listener sees a
// connection of another host); the zero address dials as Dial does.
func (n *Network) DialFrom(ctx context.Context, from netip.Addr, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, err)
	}
	if !from.IsValid() {
		from = ap.Addr()
	}
	n.mu.Lock()
	l := n.listeners[ap]
	local := netip.AddrPortFrom(from, n.port())
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if l == nil {
		return nil, refused
	}
	c, s := Pipe(local, ap)
	select {
	case l.queue <- s:
		return c, nil
	case <-l.done:
		return nil, refused
	case <-ctx.Done():
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: ctx.Err()}
	}
}

// Listener is an in-memory listener.
type Listener struct {
	n     *Network
	addr  netip.AddrPort
	queue chan *Conn
	once  sync.Once
	done  chan struct{}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close stops listening; connections queued and not accepted are reset.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		delete(l.n.listeners, l.addr)
		l.n.mu.Unlock()
		for {
			select {
			case c := <-l.queue:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr is the listener's address, a *net.TCPAddr.
func (l *Listener) Addr() net.Addr { return net.TCPAddrFromAddrPort(l.addr) }
