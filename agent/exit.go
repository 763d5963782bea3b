package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/status"
)

// ExitPort is the virtual port of the exit service, which agents started
// with Config.AllowExit serve: it dials ordinary TCP hosts for SOCKS
// clients elsewhere (gridlink socks --exit NODE), within the exit policy
// (exitpolicy.go), at most Config.ExitPerMember at once per member, each
// exit logged and counted (ExitCounters).
//
// Exit protocol, on a link to ExitPort: the dialler sends an event line
// {"dial":"HOST:PORT"}; the exit answers {"peer":"IP:PORT"} and then
// carries the TCP connection's bytes, or {"error":...,"kind":...} and
// closes: kind "not-allowed" when the exit refuses the destination, the
// error then "exit node NAME refuses HOST:PORT: WHY", as the exit's log
// says it. An agent without AllowExit does not listen there, so the dial
// is refused.
const ExitPort = 10

// DefaultExitPerMember is how many exits one member may have open at
// once at an exit, unless Config.ExitPerMember says otherwise.
const DefaultExitPerMember = 64

// exitWait bounds the wait for an exit's request, and its name lookup
// and connection.
const exitWait = 30 * time.Second

// exitService is an agent's exit service.
type exitService struct {
	node   string // the exit's node name, for the words of its refusals
	policy exitPolicy
	slots  exitSlots
	count  exitCounters
	net    exitNet
	logf   func(format string, args ...any) // always logs: each exit has two ends
}

// exitNet is how the exit service resolves names and connects: the host's
// resolver and TCP, but in tests.
type exitNet struct {
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	dial   func(ctx context.Context, to netip.AddrPort, control func(network, address string, c syscall.RawConn) error) (net.Conn, error)
}

var hostNet = exitNet{
	lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	},
	dial: func(ctx context.Context, to netip.AddrPort, control func(string, string, syscall.RawConn) error) (net.Conn, error) {
		d := net.Dialer{Control: control}
		return d.DialContext(ctx, "tcp", to.String())
	},
}

// serveExit answers exit requests on l.
func (a *Agent) serveExit(l *link.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go a.exit(c)
	}
}

func (a *Agent) exit(c net.Conn) {
	defer c.Close()
	s := a.exits
	_ = c.SetReadDeadline(time.Now().Add(exitWait))
	ev, err := control.ReadEvent(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || ev.Dial == "" {
		return
	}
	m := memberOf(c)
	target := ev.Dial
	host, port, ok := parseTarget(target)
	if !ok {
		s.refuse(c, m, strconv.Quote(target), &exitRefusal{status.ExitRefusedBadRequest, "not HOST:PORT: a host name or an IP address without a zone, and a port 1-65535"})
		return
	}
	if !s.slots.take(m.key, s.max()) {
		s.refuse(c, m, target, &exitRefusal{status.ExitRefusedPerMember,
			fmt.Sprintf("%s has %d exits open at once here, the most the exit allows (--exit-per-member); close some and try again", m.key, s.max())})
		return
	}
	release := sync.OnceFunc(func() { s.slots.give(m.key) })
	defer release()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), exitWait)
	tc, dialled, err := s.connect(ctx, host, port)
	cancel()
	var refusal *exitRefusal
	if errors.As(err, &refusal) {
		s.refuse(c, m, target, refusal)
		return
	}
	if err != nil {
		s.count.failed.Add(1)
		s.logf("exit for %s: %s (%s) failed after %s: %v", m, target, orElse(dialled, "nothing dialled"), since(start), err)
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: fmt.Sprintf("exit node %s could not reach %s: %v", s.node, target, err), Kind: tcpKind(err)}))
		return
	}
	s.count.opened.Add(1)
	s.logf("exit for %s: %s (dialled %s) opened", m, target, dialled)
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Peer: tc.RemoteAddr().String()})); err != nil {
		tc.Close()
		s.logf("exit for %s: %s (dialled %s) ended after %s: the member left before its answer: %v", m, target, dialled, since(start), err)
		return
	}
	sent, received, err := control.JoinErr(c, tc)
	release() // before the log says it ended
	s.count.sent.Add(uint64(sent))
	s.count.received.Add(uint64(received))
	outcome := "closed"
	if err != nil {
		outcome = "cut: " + err.Error()
	}
	s.logf("exit for %s: %s (dialled %s) ended after %s, %d bytes sent, %d received: %s", m, target, dialled, since(start), sent, received, outcome)
}

// since is the time since start, in milliseconds.
func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }

// max is the most exits a member may have open at once.
func (s *exitService) max() int {
	if s.slots.max > 0 {
		return s.slots.max
	}
	return DefaultExitPerMember
}

// refuse counts and logs the refusal of target to m, and tells m.
func (s *exitService) refuse(c net.Conn, m member, target string, r *exitRefusal) {
	s.count.refused(r.reason)
	msg := fmt.Sprintf("exit node %s refuses %s: %s", s.node, target, r.words)
	s.logf("exit refused %s: %s", m, msg)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: msg, Kind: control.KindNotAllowed}))
}

// parseTarget reads an exit request's HOST:PORT: an IP address or a host
// name (letters, digits, '-', '_', '.'), and a port 1-65535; nothing
// else, so that what the exit logs of it is what was asked.
func parseTarget(s string) (host string, port uint16, ok bool) {
	host, ps, err := net.SplitHostPort(s)
	if port, ok = parsePort(ps); err != nil || !ok || host == "" || net.JoinHostPort(host, ps) != s {
		return "", 0, false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return host, port, a.Zone() == "" // the exit's interfaces are not the member's to name
	}
	name := strings.TrimSuffix(host, ".")
	ok = len(name) <= 253 && !strings.HasPrefix(name, "-") && !strings.Contains(name, "..") &&
		!strings.HasPrefix(name, ".") && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
	return host, port, ok && name != ""
}

// connect resolves host here, checks every address it resolves to, and
// connects to a checked address itself (at port), checking again the
// address the socket connects to. It returns the connection and the
// address dialled; an *exitRefusal when the policy refuses.
func (s *exitService) connect(ctx context.Context, host string, port uint16) (net.Conn, string, error) {
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = s.net.lookup(ctx, host); err != nil {
		return nil, "", err
	}
	hosts, err := readHostAddrs()
	if err != nil {
		return nil, "", fmt.Errorf("reading this host's addresses: %w", err)
	}
	tos := make([]netip.AddrPort, len(addrs))
	for i, a := range addrs {
		tos[i] = netip.AddrPortFrom(a.WithZone("").Unmap(), port)
		if r := s.policy.check(tos[i], hosts); r != nil {
			if a.String() != host {
				r = &exitRefusal{r.reason, fmt.Sprintf("%s resolves to %s, %s", host, a, r.words)}
			}
			return nil, "", r
		}
	}
	var errs []error
	for _, to := range tos {
		c, err := s.net.dial(ctx, to, s.policy.control(hosts))
		if err == nil {
			return c, to.String(), nil
		}
		var r *exitRefusal
		if errors.As(err, &r) {
			return nil, to.String(), r
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, "", fmt.Errorf("%s has no address", host)
	}
	return nil, tos[0].String(), errors.Join(errs...)
}

// control is a net.Dialer's Control hook that checks the address the
// socket connects to, as check does: the address checked before must be
// the one dialled.
func (p *exitPolicy) control(hosts hostAddrs) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		to, err := netip.ParseAddrPort(address)
		if err != nil {
			return &exitRefusal{status.ExitRefusedBadRequest, "connecting to " + address + ", not an IP address"}
		}
		if r := p.check(to, hosts); r != nil {
			return &exitRefusal{r.reason, fmt.Sprintf("connecting to %s: %s", to, r.words)}
		}
		return nil
	}
}

// tcpKind classifies a TCP dial's error.
func tcpKind(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return control.KindRefused
	case errors.As(err, &dns):
		return control.KindUnknownName
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return control.KindUnreachable
	case errors.Is(err, context.DeadlineExceeded):
		return control.KindTimeout
	}
	return control.KindFailed
}

// dialExit asks node exit's exit service to dial the TCP address target.
func (a *Agent) dialExit(ctx context.Context, exit, target string, o link.Options) (net.Conn, error) {
	ea, err := identity.ParseAddr(control.VirtualAddr(exit))
	if err != nil {
		return nil, &control.StreamError{Kind: control.KindBadRequest, Msg: fmt.Sprintf("exit node %q: %v", exit, err)}
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, &control.StreamError{Kind: control.KindBadRequest, Msg: fmt.Sprintf("exit target %q: %v", target, err)}
	}
	ea.Port, ea.Service = ExitPort, ""
	c, err := link.Dial(ctx, a.node, ea.String(), o)
	if err != nil {
		var re *direct.RefusedError
		if errors.As(err, &re) && re.What != direct.RefusedLink { // nothing listens on ExitPort
			return nil, &control.StreamError{Kind: control.KindNotAllowed, Msg: fmt.Sprintf("node %s does not allow exits (its agent needs --allow-exit): %v", ea.Node, err)}
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	_, err = c.Write(control.AppendEvent(nil, control.Event{Dial: target}))
	var ev control.Event
	if err == nil {
		ev, err = control.ReadEvent(c)
	}
	stop()
	_ = c.SetDeadline(time.Time{})
	if err == nil && ev.Peer == "" {
		// the exit's words, safe to print (a log line of gridlink socks)
		err = &control.StreamError{Kind: orElse(ev.Kind, control.KindFailed), Msg: direct.Sanitize(orElse(ev.Error, "exit: no answer"))}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
