package gridlink

// A transfer service (gridlink serve): copies to and from a directory,
// and pushes from it to other services, as the caller when the grid has a
// CA (delegate.go).

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/xfer"
)

// ServeConfig configures a transfer service. The zero value serves the
// working directory on port 2811 to every peer the grid admits, over
// encrypted links of up to DefaultMaxStreams streams, without quotas or
// metrics endpoint.
type ServeConfig struct {
	Root       string // the served directory ("": the working directory); no path may leave it
	Port       uint16 // virtual port (0: TransferPort)
	MaxStreams int    // the most streams of a link (0: DefaultMaxStreams)
	AllowPlain bool   // allow clients to ask for authenticated-plain links
	// Allow and AllowGroups, if any, admit only these subjects (a user's,
	// node's or hub's certificate name) and the members of these groups;
	// they need a grid CA (else ErrAllowWithoutCA). Every peer admitted
	// may read and overwrite every file below Root (no per-user
	// permissions): without them, every member of the grid.
	Allow, AllowGroups []string
	// Quota bounds the bytes of file data Root holds, what was there
	// before included; UserQuota the bytes each user's copies add (kept in
	// Root/.gridlink-quota). Zero: no bound.
	Quota, UserQuota int64
	// Logf, if set, logs what the service does and refuses.
	Logf func(format string, args ...any)
	// ResumeTimeout is the longest a client's resumable link waits for a
	// connection back here once every one died (a client may ask for
	// less: the smaller is agreed). 0: DefaultResumeTimeout (30 s);
	// negative: links are not resumable (a client asking gets one that
	// is not).
	ResumeTimeout time.Duration
	// Metrics is the address of a Prometheus endpoint, /metrics, for the
	// service's transfers (sessions, files, bytes by operation and
	// outcome) and its node (HOST:PORT; :PORT or PORT bind
	// DefaultMetricsHost, loopback); empty: none.
	Metrics string
}

// ErrAllowWithoutCA is a service told whom to admit by name or group in
// an open grid, which proves keys, not names.
var ErrAllowWithoutCA = errors.New("admitting by name or group needs a grid CA: an open grid proves keys, not names")

// TransferService is a transfer service on a node.
type TransferService struct {
	srv     *xfer.Server
	l       net.Listener
	metrics *metrics.Server // nil without ServeConfig.Metrics
}

// ServeTransfers starts a transfer service on node, whose configuration
// is cfg (its hubs and network settings serve the transient nodes of
// delegated pushes). In a grid with a CA it pushes as the caller (a
// delegated proxy, see PushDialer), never as itself.
func ServeTransfers(node *Node, cfg Config, sc ServeConfig) (*TransferService, error) {
	maxStreams := sc.MaxStreams
	if maxStreams == 0 {
		maxStreams = DefaultMaxStreams
	}
	port := sc.Port
	if port == 0 {
		port = TransferPort
	}
	lo := link.ListenOptions{AllowPlain: sc.AllowPlain, MaxStreams: maxStreams, NoResume: sc.ResumeTimeout < 0}
	lo.Config.ResumeTimeout = max(sc.ResumeTimeout, 0)
	if len(sc.Allow)+len(sc.AllowGroups) > 0 {
		if gridTrust(node) == nil {
			return nil, ErrAllowWithoutCA
		}
		lo.Allow = pki.Members(sc.Allow, sc.AllowGroups)
	}
	xc := xfer.Config{Root: sc.Root, Push: PushDialer(cfg, node, maxStreams), Logf: sc.Logf,
		Quota: sc.Quota, UserQuota: sc.UserQuota, User: linkUser}
	if gridTrust(node) != nil {
		// a grid with a CA: push as the caller, never as this service
		xc.Delegation = xfer.ProxyDelegation{}
	}
	srv, err := xfer.NewServer(xc)
	if err != nil {
		return nil, err
	}
	l, err := link.Listen(node.n, port, lo)
	if err != nil {
		srv.Close()
		return nil, err
	}
	ts := &TransferService{srv: srv, l: l}
	if sc.Metrics != "" {
		if ts.metrics, err = metrics.Listen(sc.Metrics); err == nil {
			if err = ts.metrics.Serve(nodeMetrics(node.n), &metrics.Transfers{Counters: srv.Counters}); err != nil {
				ts.metrics.Close()
			}
		}
		if err != nil {
			l.Close()
			srv.Close()
			return nil, err
		}
	}
	return ts, nil
}

// MetricsAddr is where the service serves /metrics (ServeConfig.Metrics);
// nil without.
func (s *TransferService) MetricsAddr() net.Addr {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.Addr()
}

// Holding is how many of the service's pushes are paused by their
// callers (CopyConfig.Hold) with their sender holding its next block now.
func (s *TransferService) Holding() int { return s.srv.Holding() }

// Addr is the service's virtual address.
func (s *TransferService) Addr() net.Addr { return s.l.Addr() }

// Serve answers clients until ctx is done.
func (s *TransferService) Serve(ctx context.Context) error { return s.srv.Serve(ctx, s.l) }

// Close stops the service and its metrics endpoint.
func (s *TransferService) Close() error {
	if s.metrics != nil {
		s.metrics.Close()
	}
	s.l.Close()
	return s.srv.Close()
}

// linkUser names the user of a transfer service's client link for
// UserQuota: the name its certificate chain proves (a proxy's user; a
// node's or hub's name with its role), else its node ID.
func linkUser(c net.Conn) string {
	lc, ok := c.(*link.Conn)
	if !ok {
		return ""
	}
	p := lc.First().Proof()
	switch {
	case p.Chain != nil && p.Chain.Role == ca.User:
		return p.Chain.Name
	case p.Chain != nil:
		return p.Chain.Name + " (" + string(p.Chain.Role) + ")"
	}
	return p.ID.String()
}
