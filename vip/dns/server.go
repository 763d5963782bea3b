package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// maxUDP bounds the UDP queries answered at once (each may wait for a
// lookup); past it new ones are dropped.
const maxUDP = 256

// DefaultZone is the zone the names of the virtual network are in:
// NODE.grid.
const DefaultZone = "grid"

// Config configures a Server. Lookup is required; the zero value of every
// other field is its default.
type Config struct {
	// Zone is the domain the node names are under (default DefaultZone).
	Zone string
	// Lookup is the virtual addresses of the node named name (lower
	// case, as the query had it but for case): an error wrapping
	// ErrNotFound when no node has the name (NXDOMAIN), another error
	// when it cannot tell (SERVFAIL).
	Lookup func(ctx context.Context, name string) ([]netip.Addr, error)
	// LookupAddr, if set, is the name of the node holding a virtual
	// address a in one of Prefixes, for PTR queries of its reverse name
	// (ErrNotFound: none holds it).
	LookupAddr func(ctx context.Context, a netip.Addr) (string, error)
	Prefixes   []netip.Prefix
	// TTL is the time to live of answers, and how long answers and
	// not-founds are cached (default 5 s).
	TTL time.Duration
	// CacheSize bounds the names cached (default 1024).
	CacheSize int
	// LookupTimeout bounds one lookup (default 3 s).
	LookupTimeout time.Duration
	// Per client (source address): queries a second and their burst
	// (default 200, 400; past them its queries are dropped), and lookups
	// that miss the cache (default 20, 100: an mpirun resolving a
	// hostfile of 100 nodes at once is not refused; past them: SERVFAIL).
	ClientQueries, ClientLookups        float64
	ClientQueryBurst, ClientLookupBurst int
	// All clients' lookups together (default 100 a second, burst 200).
	Lookups     float64
	LookupBurst int
	// MaxTCP bounds the TCP connections served at once (default 64);
	// TCPIdle is how long one may stay silent (default 10 s).
	MaxTCP  int
	TCPIdle time.Duration
}

// Stats counts what a Server did.
type Stats struct {
	Queries   uint64 // messages received
	Lookups   uint64 // lookups made (cache misses within the limits)
	CacheHits uint64
	NXDomain  uint64
	ServFail  uint64
	Refused   uint64 // names outside the zone
	FormErr   uint64 // malformed queries answered FORMERR or NOTIMP
	Dropped   uint64 // unreadable messages or answers, not answered
	Limited   uint64 // queries dropped or lookups refused by a limit
}

// Server answers DNS queries for a zone. Make one with New.
type Server struct {
	cfg   Config
	zone  string // lower case, with its final dot
	ttl   uint32 // seconds
	ctx   context.Context
	stop  context.CancelFunc
	cache cacheState
	stats Stats         // atomically
	tcp   chan struct{} // TCP connections served
	udp   chan struct{} // UDP queries being answered (at most maxUDP)
	wg    sync.WaitGroup
}

// zoneName is a zone's name: lower-case labels of 1 to 63 characters.
var zoneName = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,62})?(\.[a-z0-9_]([a-z0-9_-]{0,62})?)*$`)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("dns: bad configuration")

// New makes a server of cfg; Close releases it.
func New(cfg Config) (*Server, error) {
	if cfg.Lookup == nil {
		return nil, fmt.Errorf("%w: no Lookup", ErrConfig)
	}
	if cfg.Zone == "" {
		cfg.Zone = DefaultZone
	}
	zone := strings.ToLower(strings.Trim(cfg.Zone, "."))
	if !zoneName.MatchString(zone) || len(zone) > 200 {
		return nil, fmt.Errorf("%w: zone %q is not a domain name (labels of 1 to 63 letters, digits, '-' or '_')", ErrConfig, cfg.Zone)
	}
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.TTL < time.Second {
		cfg.TTL = time.Second
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 3 * time.Second
	}
	if cfg.TCPIdle <= 0 {
		cfg.TCPIdle = 10 * time.Second
	}
	defi(&cfg.CacheSize, 1024)
	def(&cfg.ClientQueries, 200)
	defi(&cfg.ClientQueryBurst, 400)
	def(&cfg.ClientLookups, 20)
	defi(&cfg.ClientLookupBurst, 100)
	def(&cfg.Lookups, 100)
	defi(&cfg.LookupBurst, 200)
	defi(&cfg.MaxTCP, 64)
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, zone: zone + ".", ttl: uint32(cfg.TTL / time.Second), ctx: ctx, stop: stop, tcp: make(chan struct{}, cfg.MaxTCP), udp: make(chan struct{}, maxUDP)}
	s.cache.entries = map[string]entry{}
	s.cache.inflight = map[string]*call{}
	s.cache.clients = map[netip.Addr]*clientLimits{}
	s.cache.lookups = rate.NewLimiter(rate.Limit(cfg.Lookups), cfg.LookupBurst)
	return s, nil
}

// Zone is the server's zone, lower case, without its final dot.
func (s *Server) Zone() string { return strings.TrimSuffix(s.zone, ".") }

// Stats are the server's counters so far.
func (s *Server) Stats() Stats {
	p := &s.stats
	return Stats{Queries: atomic.LoadUint64(&p.Queries), Lookups: atomic.LoadUint64(&p.Lookups), CacheHits: atomic.LoadUint64(&p.CacheHits),
		NXDomain: atomic.LoadUint64(&p.NXDomain), ServFail: atomic.LoadUint64(&p.ServFail), Refused: atomic.LoadUint64(&p.Refused),
		FormErr: atomic.LoadUint64(&p.FormErr), Dropped: atomic.LoadUint64(&p.Dropped), Limited: atomic.LoadUint64(&p.Limited)}
}

func (s *Server) count(c *uint64) { atomic.AddUint64(c, 1) }

// Close stops the lookups under way and waits for Serve's goroutines.
func (s *Server) Close() error {
	s.stop()
	s.wg.Wait()
	return nil
}

// Listen opens a UDP socket and a TCP listener on one address (port 0:
// a free port, the same for both).
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp %s: %w", addr, err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" || try >= 8 {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", addr, err)
		}
	}
}

// Serve answers queries on pc (UDP) and l (TCP; either may be nil) until
// ctx ends or the server is closed; it closes both then, and returns once
// they are closed, so that their address can be listened on again at
// once.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	closed := make(chan struct{})
	defer func() {
		// the serving loops return as their sockets fail, which may be
		// before the closing goroutine's Close has closed them
		cancel()
		<-closed
	}()
	go func() {
		defer close(closed)
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		if pc != nil {
			pc.Close()
		}
		if l != nil {
			l.Close()
		}
	}()
	errs := make(chan error, 2)
	n := 0
	if pc != nil {
		n++
		go func() { errs <- s.serveUDP(ctx, pc) }()
	}
	if l != nil {
		n++
		go func() { errs <- s.serveTCP(ctx, l) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil && ctx.Err() == nil && s.ctx.Err() == nil {
			first = err
			cancel()
		}
	}
	return first
}

func (s *Server) serveUDP(ctx context.Context, pc net.PacketConn) error {
	buf := make([]byte, MaxQuery+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dns: udp: %w", err)
		}
		client := addrOf(from)
		select {
		case s.udp <- struct{}{}:
		default:
			s.count(&s.stats.Limited) // maxUDP queries waiting for lookups already
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.udp }()
			if out := s.Handle(ctx, client, q, false); out != nil {
				pc.WriteTo(out, from)
			}
		}()
	}
}

func (s *Server) serveTCP(ctx context.Context, l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dns: tcp: %w", err)
		}
		select {
		case s.tcp <- struct{}{}:
		default:
			s.count(&s.stats.Limited)
			c.Close() // too many connections at once
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.tcp }()
			s.serveConn(ctx, c)
		}()
	}
}

// serveConn answers the queries of one TCP connection in order (two-byte
// length, then the message) until it is idle for TCPIdle, sends a length
// of 0 or over MaxQuery, or closes.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	client := addrOf(c.RemoteAddr())
	var lb [2]byte
	for {
		c.SetDeadline(time.Now().Add(s.cfg.TCPIdle))
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lb[:]))
		if n == 0 || n > MaxQuery {
			s.count(&s.stats.Dropped)
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		out := s.Handle(ctx, client, q, true)
		if out == nil {
			continue
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

// addrOf is the IP address of a socket address (zero if it has none).
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}
