package direct

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// PortRange confines listeners to ports Lo through Hi (SmartSockets
// §3.2.3: a firewall's open port range). The zero value means any port
// (the kernel's choice); Hi 0 means Hi = Lo.
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) String() string {
	if r.Hi == 0 || r.Hi == r.Lo {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// ListenConfig configures a Listener. Only Creds is required.
type ListenConfig struct {
	Creds *pki.Credentials
	// Addr is the host part to bind; "" means "0.0.0.0" (all IPv4
	// interfaces).
	Addr string
	// Ports: the first free port of the range, tried in order; zero: the
	// kernel's choice.
	Ports PortRange
	// Accept decides whether a dialler may connect at all; nil: anyone.
	Accept func(identity.ID) error
	// Check decides whether a dialler may make this request (the ALPN
	// request, "" for none); nil: any. Its error's text is sent to the
	// dialler as the reason.
	//
	// Accept and Check run when the ClientHello arrives, on the ID the
	// dialler claims there: a refusal thus reaches it within the handshake.
	// The claim binds: a dialler whose certificate proves another ID fails
	// the handshake and never reaches Listener.Accept.
	Check func(peer identity.ID, request string) error
	// Admit judges the dialler once its certificate chain is checked (the
	// credentials' pki.Trust) and may refuse it (access control by
	// subject or group); nil: any dialler the credentials admit. Its
	// error's text reaches the dialler in the handshake's verdict.
	Admit func(peer pki.Peer, request string) error
	// HandshakeTimeout bounds each incoming handshake; default 10s.
	HandshakeTimeout time.Duration
	// Local returns this host's interface prefixes for Machine; default:
	// LocalPrefixes at the time of the call.
	Local func() []netip.Prefix
	// Logger receives failed and refused handshakes; nil: slog.Default().
	Logger *slog.Logger
}

// A listener's handshakes in progress are bounded by its Gate (256 in
// all, 16 per source address: the oldest idle one is shed for a
// newcomer); handshaken connections waiting for Accept by maxWaiting
// (past it the newest is closed).
const (
	maxWaiting = 1024
	// acceptBackoffMax caps the pause of an accept loop out of file
	// descriptors with nothing pending to shed.
	acceptBackoffMax = 100 * time.Millisecond
)

// Listener accepts direct connections: TCP, then a TLS handshake run
// concurrently with the others under a timeout.
type Listener struct {
	cfg     ListenConfig
	ln      net.Listener
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	ready   chan *Conn
	wg      sync.WaitGroup
	closing sync.Once
	mu      sync.Mutex // orders ServeConn's wg.Add before Close's Wait
	stats   struct{ accepted, refused, failed atomic.Uint64 }
	gate    Gate         // bounds handshakes in progress
	quiet   *Quiet       // rate-limits lines about strangers' connections
	waiting atomic.Int64 // handshaken, not yet taken by Accept
}

// Stats counts what a listener did with incoming connections.
type Stats struct {
	Accepted uint64 // handed to Accept (or waiting for it)
	Refused  uint64 // refused by ListenConfig.Accept or Check
	Failed   uint64 // failed handshakes: timeouts, garbage, wrong claims, aborted dials
}

// Listen opens a listener. ctx bounds the setup only; the listener lives
// until Close. The socket is made in the network namespace of the calling
// thread.
func Listen(ctx context.Context, cfg ListenConfig) (*Listener, error) {
	if _, err := certificate(cfg.Creds); err != nil {
		return nil, fmt.Errorf("direct: listen: %w", err)
	}
	if cfg.Addr == "" {
		cfg.Addr = "0.0.0.0"
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.Local == nil {
		cfg.Local = localOrNil
	}
	network := "tcp4"
	if a, err := netip.ParseAddr(cfg.Addr); err == nil && a.Is6() && !a.Is4In6() {
		network = "tcp6"
	}
	ln, err := listenRange(ctx, network, cfg.Addr, cfg.Ports)
	if err != nil {
		return nil, err
	}
	l := &Listener{cfg: cfg, ln: ln, log: cfg.Logger, ready: make(chan *Conn)}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.gate.Spoke = func(c net.Conn) bool { return WholeFirstMessage(c, "") }
	l.quiet = NewQuiet(0, 0, func(reason QuietKind, more int, since time.Time) {
		l.log.Info("direct: more connections not logged", "reason", reason, "count", more, "since", since.Format(time.TimeOnly))
	})
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// listenRange binds the first free port of r on host.
func listenRange(ctx context.Context, network, host string, r PortRange) (net.Listener, error) {
	lc := net.ListenConfig{Control: listenControl}
	if r == (PortRange{}) {
		ln, err := lc.Listen(ctx, network, net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("direct: listen on %s: %w", host, err)
		}
		return ln, nil
	}
	hi := r.Hi
	if hi == 0 {
		hi = r.Lo
	}
	if r.Lo == 0 || hi < r.Lo {
		return nil, fmt.Errorf("direct: listen on %s: bad port range %d-%d", host, r.Lo, r.Hi)
	}
	for p := int(r.Lo); p <= int(hi); p++ {
		ln, err := lc.Listen(ctx, network, net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("direct: listen on %s port %d: %w", host, p, err)
		}
	}
	return nil, fmt.Errorf("direct: listen on %s: every port in %v is in use (or not permitted)", host, r)
}

func (l *Listener) loop() {
	defer l.wg.Done()
	retry := backoff.ExponentialBackOff{InitialInterval: 5 * time.Millisecond, Multiplier: 2, MaxInterval: acceptBackoffMax}
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors: make room by shedding the
				// oldest pending handshake, and take the next at once.
				if s, ok := l.gate.ShedOldest(fmt.Sprintf("out of file descriptors (%v)", err)); ok {
					l.quietly("shed", "direct: shed", "from", s.From, "reason", s.Reason)
					continue
				}
			}
			pause := retry.NextBackOff()
			l.quietly("accept", "direct: accept", "addr", l.ln.Addr().String(), "err", err, "retry", pause)
			select {
			case <-time.After(pause):
			case <-l.ctx.Done():
				return
			}
			continue
		}
		retry.Reset()
		pend, shed := l.gate.Admit(raw)
		if shed != nil {
			l.quietly("shed", "direct: shed", "from", shed.From, "reason", shed.Reason)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serve(raw, pend)
		}()
	}
}

// quietly logs a line about a stranger's connection, rate-limited by
// kind (Quiet): refusals by their reason's kind (RefusalKind), which the
// line says.
func (l *Listener) quietly(kind QuietKind, msg string, args ...any) {
	if l.quiet.Allow(kind) {
		l.log.Info(msg, args...)
	}
}

// serve runs one incoming handshake and hands the connection to Accept.
// The gate holds pend (nil: a connection no gate holds) until the
// handshake ends; its first message must come within FirstBytesTimeout.
func (l *Listener) serve(raw net.Conn, pend *Pending) {
	defer pend.Done()
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	defer cancel()
	from := raw.RemoteAddr().String()
	_ = raw.SetReadDeadline(time.Now().Add(FirstBytesTimeout))
	stop := context.AfterFunc(ctx, func() { _ = raw.SetReadDeadline(time.Now()) }) // Close aborts it
	err := PeekFirstRecord(raw)
	stop()
	if err != nil {
		raw.Close()
		l.stats.failed.Add(1)
		switch {
		case pend.Err() != nil: // logged when shed
		case errors.Is(err, ErrNotTLS):
			l.quietly("failed", "direct: handshake failed", "from", from, "err", err)
		default:
			l.quietly("silent", "direct: no whole TLS ClientHello", "from", from, "within", FirstBytesTimeout, "err", err)
		}
		return
	}
	_ = raw.SetReadDeadline(time.Time{})
	pend.Hello()
	var st serverState
	cert, _ := certificate(l.cfg.Creds) // the chain in force now (pki.Credentials.Renew); checked in Listen
	tc := tls.Server(pki.NoReadAhead(raw), serverConfig(cert, &st, l.decide))
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		if st.refusal != "" {
			l.stats.refused.Add(1)
			l.quietly(st.kind, "direct: refused", "from", from, "peer", st.claim.Short(), "reason", st.refusal, "err", err)
			return
		}
		l.stats.failed.Add(1)
		if pend.Err() == nil {
			l.quietly("failed", "direct: handshake failed", "from", from, "err", err)
		}
		return
	}
	if st.refusal != "" {
		l.stats.refused.Add(1)
		l.quietly(st.kind, "direct: refused", "from", from, "peer", st.claim.Short(), "request", st.request, "reason", st.refusal)
		_ = raw.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = tc.Write(encodeRefusal(st.refusal))
		tc.Close()
		return
	}
	var admit func(pki.Peer) error
	if l.cfg.Admit != nil {
		admit = func(p pki.Peer) error { return l.cfg.Admit(p, st.request) }
	}
	pc, err := l.cfg.Creds.Settle(tc, admit)
	if err != nil {
		l.stats.refused.Add(1)
		l.quietly(RefusalKind(err), "direct: refused", "from", from, "request", st.request, "err", err)
		return
	}
	pend.Done()
	// Handshaken connections no Accept has taken yet are bounded too.
	if l.waiting.Add(1) > maxWaiting {
		l.waiting.Add(-1)
		l.quietly("unaccepted", "direct: dropped a handshaken connection no Accept took", "from", from, "waiting", maxWaiting)
		pc.Close()
		return
	}
	defer l.waiting.Add(-1)
	l.stats.accepted.Add(1)
	c := &Conn{Conn: pc, Peer: st.claim, Request: st.request, Via: from}
	select {
	case l.ready <- c:
	case <-l.ctx.Done():
		tc.Close()
	}
}

// ServeConn runs the accepting side of the handshake over raw, a
// connection made some other way (a TCP splice: both ends connected), and
// hands it to Accept like the listener's own. After Close it closes raw.
func (l *Listener) ServeConn(raw net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		raw.Close()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.serve(raw, nil)
	}()
}

// decide applies Accept, then Check.
func (l *Listener) decide(peer identity.ID, request string) error {
	if l.cfg.Accept != nil {
		if err := l.cfg.Accept(peer); err != nil {
			return err
		}
	}
	if l.cfg.Check != nil {
		return l.cfg.Check(peer, request)
	}
	return nil
}

// Accept returns the next handshaken connection. Failed and refused
// handshakes are logged and counted (Stats), never returned. After Close it
// returns an error wrapping net.ErrClosed.
func (l *Listener) Accept() (*Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, fmt.Errorf("direct: accept on %v: %w", l.ln.Addr(), net.ErrClosed)
	}
}

// Close stops the listener, aborts handshakes in progress and closes the
// connections no Accept took. It waits for its goroutines to end.
func (l *Listener) Close() error {
	var err error
	l.closing.Do(func() {
		l.mu.Lock()
		l.cancel()
		l.mu.Unlock()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Port returns the listening port.
func (l *Listener) Port() uint16 {
	if ta, ok := l.ln.Addr().(*net.TCPAddr); ok {
		return uint16(ta.Port)
	}
	return 0
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	return Stats{
		Accepted: l.stats.accepted.Load(),
		Refused:  l.stats.refused.Load(),
		Failed:   l.stats.failed.Load(),
	}
}

// Machine returns a machine identifier for this host as reached through
// this listener: id and name, and every address it listens on with its
// port. Listening on all interfaces, those are the IPv4 addresses of the
// up interfaces other than loopback and link-local (loopback only if there
// is nothing else); listening on one address, that address.
func (l *Listener) Machine(id identity.ID, name string) identity.Machine {
	m := identity.Machine{ID: id, Name: name}
	if a, err := netip.ParseAddr(l.cfg.Addr); err == nil && !a.IsUnspecified() {
		m.Addrs = []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), l.Port())}
		return m
	}
	m.Addrs = machineAddrs(l.cfg.Local(), l.Port())
	return m
}
