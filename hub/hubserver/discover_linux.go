package hubserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/identity"
)

// Announcer answers discovery queries for a hub.
type Announcer struct {
	conn *net.UDPConn
	name string
	id   identity.ID
	port uint16
}

// ListenDiscovery opens the hub's discovery socket, joined to
// DiscoveryGroup on every multicast-capable IPv4 interface. The socket
// lives in the network namespace of the calling thread.
func ListenDiscovery(name string, id identity.ID, port uint16) (*Announcer, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", DiscoveryGroup.Port()))
	if err != nil {
		return nil, fmt.Errorf("hub discovery: %w", err)
	}
	conn := pc.(*net.UDPConn)
	joined := 0
	for _, a := range multicastAddrs() {
		rc, _ := conn.SyscallConn()
		_ = rc.Control(func(fd uintptr) {
			mreq := &unix.IPMreq{Multiaddr: DiscoveryGroup.Addr().As4(), Interface: a.As4()}
			if unix.SetsockoptIPMreq(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq) == nil {
				joined++
			}
		})
	}
	if joined == 0 {
		conn.Close()
		return nil, errors.New("hub discovery: no multicast-capable interface to listen on")
	}
	return &Announcer{conn: conn, name: name, id: id, port: port}, nil
}

// Serve answers queries until ctx ends. Anything that is not a query is
// ignored.
func (a *Announcer) Serve(ctx context.Context) error {
	go func() { <-ctx.Done(); a.conn.Close() }()
	buf := make([]byte, maxDatagram+1)
	answer := encodeAnswer(a.name, a.id, a.port)
	for {
		n, src, err := a.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("hub discovery: %w", err)
		}
		if string(buf[:n]) != discoverQuery {
			continue
		}
		_, _ = a.conn.WriteToUDPAddrPort(answer, src)
	}
}

// Close stops answering.
func (a *Announcer) Close() error { return a.conn.Close() }

// Discover asks every multicast-capable interface for hubs and returns
// those that answer within wait. The socket is made in the network
// namespace of the calling thread.
func Discover(ctx context.Context, wait time.Duration) ([]Found, error) {
	addrs := multicastAddrs()
	if len(addrs) == 0 {
		return nil, errors.New("hub discovery: no multicast-capable interface")
	}
	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		return nil, fmt.Errorf("hub discovery: %w", err)
	}
	conn := pc.(*net.UDPConn)
	defer conn.Close()
	rc, _ := conn.SyscallConn()
	for _, a := range addrs {
		var serr error
		_ = rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 1)
			if serr == nil {
				serr = unix.SetsockoptInet4Addr(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, a.As4())
			}
		})
		if serr == nil {
			_, _ = conn.WriteToUDPAddrPort([]byte(discoverQuery), DiscoveryGroup)
		}
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetReadDeadline(deadline)
	seen := map[netip.AddrPort]bool{}
	var found []Found
	buf := make([]byte, maxDatagram+1)
	for {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		f, err := parseAnswer(buf[:n], src.Addr().Unmap())
		if err != nil || seen[f.Addr] {
			continue
		}
		seen[f.Addr] = true
		found = append(found, f)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("hub discovery: no hub answered on %v within %v", addrs, wait)
	}
	return found, nil
}

// multicastAddrs lists the IPv4 addresses of up, multicast-capable,
// non-loopback interfaces.
func multicastAddrs() []netip.Addr {
	ifs, _ := net.Interfaces()
	var out []netip.Addr
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagMulticast == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && ip.Is4() {
					out = append(out, ip)
				}
			}
		}
	}
	return out
}
