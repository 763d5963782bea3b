// Package agent is the node agent: the long-running process (`gridlink
// node`) that holds a node's identity, hub session and method cache, and
// serves the local control API that the CLI (ping, status, perf, nc,
// socks, forward, expose) uses. It owns the agent's lifecycle, its built-in echo
// service and the control protocol; connection setup is package vconn's.
//
// The control API is HTTP with JSON bodies over a unix socket, served only
// to the agent's own uid and root (control.go). Root's agent listens on
// the abstract socket "@gridlink-agent", which Linux scopes to the
// network namespace: one system agent per host, also in the lab; any
// other user's agent on a socket of that user (UserControl).
//
// Programs that do not link gridlink go through the agent: a stream
// request (stream.go) upgrades its control connection into the bytes of
// an overlay link (connect), of a bind's one peer, or keeps an exposed
// service published while it stays open. So gridlink nc, forward and socks
// start no node of their own and use the agent's method cache, spares and
// hub session. Their connects hand the agent their local end (a socket,
// or nc's stdin and stdout) as file descriptors, so that the agent copies
// it to the link without them (handoff.go; BENCHMARKS.md, unmodified
// applications). Every agent also answers on
// its service directory port (services.go) and, only with AllowExit, on
// the exit port (exit.go), which dials ordinary TCP hosts for SOCKS clients
// elsewhere.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/vconn"
)

// DefaultControl is the system agent's control socket address (abstract,
// per network namespace): root's agent listens there.
const DefaultControl = "@gridlink-agent"

// EchoPort is the virtual port of every agent's echo service.
const EchoPort = 7

// Config configures an agent.
type Config struct {
	Node vconn.Config
	// Control is the control socket; default OwnControl: DefaultControl
	// for root, UserControl for anyone else.
	Control string
	// AllowExit serves the exit service (ExitPort): other nodes' SOCKS
	// clients may then reach any TCP address this host can. Off by default.
	AllowExit bool
}

// Agent is a running node agent.
type Agent struct {
	node    *vconn.Node
	control string
	ln      net.Listener
	srv     *http.Server
	echo    *vconn.Listener
	logf    func(format string, args ...any)
	// services names exposed ports (expose --name).
	services services
	// setups bounds the connection setups under way (MaxSetups).
	setups setupQueue
	// ends remembers why connect streams ended (streamend.go).
	ends streamEnds
	// refused logs a refused control request.
	refused func(format string, args ...any)
}

// Start brings the node up and serves the control API and echo service.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Control == "" {
		cfg.Control = OwnControl()
		if cfg.Control != DefaultControl {
			if err := prepareSocketDir(filepath.Dir(cfg.Control), os.Geteuid()); err != nil {
				return nil, err
			}
		}
	}
	node, err := vconn.Start(ctx, cfg.Node)
	if err != nil {
		return nil, err
	}
	a := &Agent{node: node, control: cfg.Control, logf: cfg.Node.Logf}
	if a.logf == nil {
		a.logf = func(string, ...any) {}
	}
	if a.echo, err = node.Listen(EchoPort); err != nil {
		node.Close()
		return nil, err
	}
	go serve(a.echo, echo)
	sink, err := node.Listen(SinkPort)
	if err != nil {
		node.Close()
		return nil, err
	}
	go serve(sink, sinkConn)
	dir, err := node.Listen(ServicesPort)
	if err != nil {
		node.Close()
		return nil, err
	}
	go serve(dir, a.answer)
	if cfg.AllowExit {
		ex, err := link.Listen(node, ExitPort, link.ListenOptions{AllowPlain: true})
		if err != nil {
			node.Close()
			return nil, err
		}
		go a.serveExit(ex)
	}
	if a.ln, err = listenControl(cfg.Control); err != nil {
		node.Close()
		return nil, fmt.Errorf("agent: control socket %s: %w (is another agent running here?)", cfg.Control, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", a.status)
	mux.HandleFunc("POST /ping", a.ping)
	mux.HandleFunc("POST /doctor", a.doctor)
	mux.HandleFunc("POST /perf", a.perf)
	mux.HandleFunc("POST /connect", a.connect)
	mux.HandleFunc("POST /bind", a.bind)
	mux.HandleFunc("POST /expose", a.expose)
	mux.HandleFunc("GET /stream/{id}/end", a.streamEnd)
	a.refused = a.refusalLog(cfg.Node.Logf)
	a.srv = &http.Server{Handler: Guard("agent", mux, a.refused), ConnContext: PeerContext, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(a.ln)
	return a, nil
}

// refusalLog is where refused control callers are logged: the node's log
// or, without one, standard error; always, as the refusal's other end.
func (a *Agent) refusalLog(logf func(string, ...any)) func(string, ...any) {
	if logf != nil {
		return func(format string, args ...any) { logf("agent: "+format, args...) }
	}
	return func(format string, args ...any) { fmt.Fprintf(os.Stderr, "gridlink node: "+format+"\n", args...) }
}

// Control is the agent's control socket.
func (a *Agent) Control() string { return a.control }

// Node is the agent's node.
func (a *Agent) Node() *vconn.Node { return a.node }

// Close stops the agent.
func (a *Agent) Close() error {
	a.srv.Close()
	return a.node.Close()
}

// serve runs handle on every connection l accepts, each in its own
// goroutine, and closes it afterwards.
func serve(l *vconn.Listener, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// Status is the answer of GET /status.
type Status struct {
	Node identity.Machine `json:"node"`
	// Attach is empty while the node is attached to a hub, else what its
	// session is doing: "attaching to HUB: reason, retrying (not attached
	// since T)", or the refusal that ended it.
	Attach   string            `json:"attach,omitempty"`
	Observed string            `json:"observed,omitempty"`
	Conns    []vconn.ConnInfo  `json:"conns"`
	Cache    map[string]string `json:"cache"` // target hub -> method
	NAT      NATInfo           `json:"nat"`
	PortMap  PortMapInfo       `json:"port_map"`
}

func (a *Agent) status(w http.ResponseWriter, r *http.Request) {
	st := Status{Node: a.node.Machine(), Attach: a.node.AttachState(), Conns: a.node.Conns(), Cache: map[string]string{}, NAT: natInfo(a.node), PortMap: portMapInfo(a.node)}
	if s := a.node.Session(); s != nil {
		st.Observed = s.Observed().String()
	}
	for hub, m := range a.node.CachedMethods() {
		st.Cache[hub.Short()] = string(m)
	}
	writeJSON(w, st)
}

// PingRequest is the body of POST /ping.
type PingRequest struct {
	Addr  string `json:"addr"`  // NODE[:PORT][@HUB]; port defaults to the echo port
	Count int    `json:"count"` // round trips per connection (default 3)
	Dials int    `json:"dials"` // connections to set up one after another (default 2: uncached, cached)
	Fresh bool   `json:"fresh"` // forget cached methods, names, addresses and spares first
}

// PingResult is the answer of POST /ping.
type PingResult struct {
	Addr    string    `json:"addr"`
	Peer    string    `json:"peer"`
	Method  string    `json:"method"`   // of the first connection
	Methods []string  `json:"methods"`  // of every connection
	SetupMS []float64 `json:"setup_ms"` // setup time of every connection
	Spare   []bool    `json:"spare"`    // whether each connection used a spare (vconn.Config.SpareTTL)
	RTTMS   []float64 `json:"rtt_ms"`   // round trips, Count on every connection
	Error   string    `json:"error,omitempty"`
}

// decode reads a control request body into v, or answers 400 and reports
// false.
func decode(w http.ResponseWriter, r *http.Request, what string, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(v); err != nil {
		http.Error(w, "bad "+what+" request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// withPort gives a virtual address without a port the port def.
func withPort(addr string, def uint16) string {
	if pa, err := identity.ParseAddr(addr); err == nil && pa.Port == 0 && pa.Service == "" {
		pa.Port = def
		return pa.String()
	}
	return addr
}

func (a *Agent) ping(w http.ResponseWriter, r *http.Request) {
	var req PingRequest
	if !decode(w, r, "ping", &req) {
		return
	}
	if req.Count <= 0 {
		req.Count = 3
	}
	if req.Dials <= 0 {
		req.Dials = 2
	}
	addr := withPort(req.Addr, EchoPort)
	if req.Fresh {
		a.node.ForgetCache()
	}
	res := PingResult{Addr: addr}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	for i := 0; i < req.Dials; i++ {
		c, err := a.dial(ctx, addr)
		if err != nil {
			res.Error = err.Error()
			break
		}
		res.Methods = append(res.Methods, string(c.Method()))
		res.SetupMS = append(res.SetupMS, ms(c.Setup()))
		res.Spare = append(res.Spare, c.Spare())
		res.Peer = c.RemoteAddr().String()
		if i == 0 {
			res.Method = string(c.Method())
		}
		// every connection is used, as an application would use it, not
		// dropped at once.
		rtts, err := roundTrips(c, req.Count)
		res.RTTMS = append(res.RTTMS, rtts...)
		if err != nil {
			res.Error = err.Error()
		}
		c.Close()
		if res.Error != "" {
			break
		}
	}
	writeJSON(w, res)
}

// dial sets up a connection in turn (setups).
func (a *Agent) dial(ctx context.Context, addr string) (*vconn.Conn, error) {
	if err := a.setups.acquire(ctx); err != nil {
		return nil, fmt.Errorf("waiting for a turn to set up a connection to %s: %w", addr, err)
	}
	defer a.setups.release()
	return a.node.Dial(ctx, addr)
}

func roundTrips(c net.Conn, n int) ([]float64, error) {
	var out []float64
	buf := make([]byte, 8)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return out, fmt.Errorf("echo: %w", err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return out, fmt.Errorf("echo: %w", err)
		}
		out = append(out, ms(time.Since(start)))
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Client talks to a running agent's control API.
type Client struct {
	hc *http.Client
	// controls are the sockets tried in order; byDefault: they were not
	// given, so the agent behind one must run as the caller or root.
	controls  []string
	byDefault bool
}

// Dial returns a client for the agent at control; "" tries the caller's
// own agent (UserControl, for users other than root), then the system
// agent (DefaultControl).
func Dial(control string) *Client {
	c := &Client{controls: []string{control}}
	if control == "" {
		c.controls, c.byDefault = defaultControls(), true
	}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) },
	}}
	return c
}

// ErrNoAgent says no agent answers on the control socket.
var ErrNoAgent = errors.New("no gridlink node agent runs here: start one with `gridlink node --hub HOST:PORT`")

// DialError is a control socket that could not be reached for another
// reason than that no agent listens there (permission denied, say).
type DialError struct {
	Control string
	Err     error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("agent: control socket %s: %v", e.Control, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// dial connects to the first control socket that answers.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	for _, control := range c.controls {
		conn, err := d.DialContext(ctx, "unix", control)
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, &DialError{Control: control, Err: err}
		}
		if c.byDefault {
			if uid, _, err := peerCred(conn); err == nil && uid != 0 && uid != os.Geteuid() {
				conn.Close()
				return nil, &ForeignAgentError{Control: control, UID: uid}
			}
		}
		return conn, nil
	}
	return nil, ErrNoAgent
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var fe *ForeignAgentError
		var de *DialError
		switch {
		case errors.Is(err, ErrNoAgent):
			return ErrNoAgent
		case errors.As(err, &fe):
			return fe
		case errors.As(err, &de):
			return de
		}
		return fmt.Errorf("agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ResponseError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Status asks the agent for its status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	return &st, c.do(ctx, "GET", "/status", nil, &st)
}

// Doctor asks the agent to diagnose this host and, if addr is given, the
// way to a target.
func (c *Client) Doctor(ctx context.Context, addr string) (*Diagnosis, error) {
	var d Diagnosis
	return &d, c.do(ctx, "POST", "/doctor", DoctorRequest{Addr: addr}, &d)
}

// Ping asks the agent to ping a virtual address.
func (c *Client) Ping(ctx context.Context, req PingRequest) (*PingResult, error) {
	var res PingResult
	return &res, c.do(ctx, "POST", "/ping", req, &res)
}
