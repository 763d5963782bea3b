package gridlink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/status"
)

// HubConfig configures a hub. The zero value works: a hub named after the
// host, with a fresh key, in an open grid, listening on 0.0.0.0:7946,
// linking to no other hub, without a status socket or metrics endpoint,
// logging to slog.Default().
type HubConfig struct {
	// Name is the hub's name, usually its site's. Empty: the name its
	// certificate certifies, else FallbackName, else the host name.
	Name, FallbackName string
	// Key is the hub's identity key; KeyFile, if Key is zero, a file to
	// load it from (made if missing). Neither: a fresh key.
	Key     Key
	KeyFile string
	// Credentials are the certificate files; zero: an open grid.
	Credentials Credentials
	// Listen is the address for hub links and node attachments; empty:
	// 0.0.0.0:7946.
	Listen string
	// Peers are other hubs to link to: HOST:PORT or
	// ssh://[USER@]HOST[:PORT]/[TARGET:]PORT.
	Peers []string
	// SSH configures ssh:// peers; nil: ~/.ssh defaults.
	SSH *SSHConfig
	// Control is the status socket (HubStatusServer; HubControl is the
	// one `gridlink status --hub` asks); empty: none.
	Control string
	// Announce answers hub discovery queries (UDP multicast on this host's
	// networks).
	Announce bool
	// Metrics is the address of the hub's Prometheus endpoint, /metrics
	// (HOST:PORT; :PORT or PORT bind DefaultMetricsHost, loopback); empty:
	// none. It answers whoever reaches it (no uid check, no certificate):
	// hub names, routes, link round trips, counts; no node names or
	// addresses.
	Metrics string
	// Logger receives the hub's log (links, routes, refusals), each record
	// with hub=NAME; nil: slog.Default().
	Logger *slog.Logger
	// TrunkConnections is how many TCP connections a trunk this hub dials
	// to another hub carries: 0 by the trunk's round trip (one per 10 ms,
	// up to 8), 1 one (and further connections others dial are refused);
	// see hubserver.Config.Lanes.
	TrunkConnections int
	// TrunkCongestion is the TCP congestion control between hubs: "" bbr
	// where the kernel has it, "default" the kernel's default, or a name
	// (hubserver.Config.Congestion).
	TrunkCongestion string
	// MaxLinks bounds the trunks to other hubs at which this hub stops
	// dialling the hubs it learns of: 0, the default, 6
	// (hubserver.DefaultMaxLinks); a negative number dials every one (a
	// full mesh); see hubserver.Config.MaxLinks.
	MaxLinks int
	// VIPPrefixes are the grid's virtual prefixes, in which the hub admits
	// its nodes' claims of virtual addresses; empty: DefaultVIPPrefix4 and
	// DefaultVIPPrefix6 (hubserver.Config.VirtualPrefixes).
	VIPPrefixes []netip.Prefix
}

// HubControl is the hub's status socket (abstract, per network namespace)
// that `gridlink hub` serves and `gridlink status --hub` asks. Like an
// agent's control socket, it answers only the hub's own uid and root.
const HubControl = "@gridlink-hub"

// DefaultHubListen is where a hub listens unless told otherwise.
const DefaultHubListen = "0.0.0.0:7946"

// Hub is a running hub.
type Hub struct {
	h          *hubserver.Hub
	cfg        HubConfig
	trust      *pki.Trust
	logf       func(string, ...any)
	stopStatus func()
	metrics    *metrics.Server // nil without HubConfig.Metrics
}

// NewHub makes a hub: its key and credentials, its listener and, with
// Control, its status socket. Serve runs it (and must: the hub's
// listener and status socket close when Serve returns).
func NewHub(cfg HubConfig) (*Hub, error) {
	key, err := loadKey(cfg.Key, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	creds, trust, err := cfg.Credentials.Load(key)
	if err != nil {
		return nil, err
	}
	cfg.Name = pickName(cfg.Name, cfg.FallbackName, creds)
	if cfg.Listen == "" {
		cfg.Listen = DefaultHubListen
	}
	l := cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	logf := logfOf(l.With("hub", cfg.Name))
	var status net.Listener
	if cfg.Control != "" {
		if status, err = net.Listen("unix", cfg.Control); err != nil {
			return nil, fmt.Errorf("hub status socket %s: %w (is another hub running here?)", cfg.Control, err)
		}
	}
	var ms *metrics.Server
	if cfg.Metrics != "" {
		if ms, err = metrics.Listen(cfg.Metrics); err != nil {
			if status != nil {
				status.Close()
			}
			return nil, err
		}
	}
	d := &direct.Dialer{Creds: creds, SSH: cfg.SSH}
	h, err := hubserver.New(hubserver.Config{Name: cfg.Name, Creds: creds, Listen: cfg.Listen, Peers: cfg.Peers, Dial: d.Transport, Logf: logf,
		Lanes: cfg.TrunkConnections, Congestion: cfg.TrunkCongestion, MaxLinks: cfg.MaxLinks, VirtualPrefixes: cfg.VIPPrefixes})
	if err == nil && ms != nil {
		err = ms.Serve(hubMetrics(h))
	}
	if err != nil {
		if status != nil {
			status.Close()
		}
		if ms != nil {
			ms.Close()
		}
		return nil, err
	}
	hh := &Hub{h: h, cfg: cfg, trust: trust, logf: logf, stopStatus: func() {}, metrics: ms}
	if status != nil {
		hh.stopStatus = serveHubStatus(h, status, hh.named)
	}
	return hh, nil
}

// named logs a line prefixed with the hub's name.
func (h *Hub) named(f string, a ...any) { h.logf("hub %s: "+f, append([]any{h.cfg.Name}, a...)...) }

// Serve runs the hub until ctx is done: it rereads the revocation list as
// it changes, answers discovery if asked to, logs its start and serves hub
// links and attachments. It closes the status socket and the metrics
// endpoint when it returns.
func (h *Hub) Serve(ctx context.Context) error {
	defer h.stopStatus()
	if h.metrics != nil {
		defer h.metrics.Close()
	}
	if h.trust != nil {
		go h.trust.Watch(ctx, 0, h.named)
	}
	if h.cfg.Announce {
		a, err := hubserver.ListenDiscovery(h.cfg.Name, h.h.ID(), uint16(h.h.Addr().(*net.TCPAddr).Port))
		if err != nil {
			return err
		}
		go a.Serve(ctx)
	}
	h.logf("gridlink hub %s (%s) listening on %s", h.cfg.Name, h.h.ID().Short(), h.h.Addr()) // a timestamped record like every other line
	return h.h.Serve(ctx)
}

// Name is the hub's name; ID its ID; Addr where it listens.
func (h *Hub) Name() string { return h.cfg.Name }

// ID is the hub's ID.
func (h *Hub) ID() ID { return h.h.ID() }

// Addr is where the hub listens.
func (h *Hub) Addr() net.Addr { return h.h.Addr() }

// Status is the hub's state: routes, links, attached nodes.
func (h *Hub) Status() HubStatus { return statusOf(h.h) }

// HubStatus is what a hub reports on its status socket, in the shapes of
// package status.
type HubStatus = status.Hub

func statusOf(h *hubserver.Hub) HubStatus { return h.Status() }

// serveHubStatus answers GET /status on the hub's status socket ln, to
// the hub's uid and root only, until the function it returns is called.
func serveHubStatus(h *hubserver.Hub, ln net.Listener, logf func(string, ...any)) func() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(statusOf(h))
	})
	srv := &http.Server{Handler: agent.Guard("hub", mux, logf), ConnContext: agent.PeerContext, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }
}

// NoHubError says that no hub answers on a status socket.
type NoHubError struct {
	Control string
	Err     error
}

func (e *NoHubError) Error() string {
	return fmt.Sprintf("no gridlink hub answers on %s: %v", e.Control, e.Err)
}
func (e *NoHubError) Unwrap() error { return e.Err }

// QueryHub asks the hub on the status socket sock (HubControl: the
// one `gridlink hub` serves by default) for its status. A hub refusing
// the caller's uid says so in the error.
func QueryHub(ctx context.Context, sock string) (HubStatus, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://hub/status", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return HubStatus{}, &NoHubError{Control: sock, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return HubStatus{}, control.ResponseError(resp)
	}
	var st HubStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return HubStatus{}, err
	}
	return st, nil
}
