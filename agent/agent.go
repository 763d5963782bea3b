// Package agent is the node agent: the long-running process (`gridlink
// node`) that holds a node's identity, hub session and method cache, and
// serves the local control API that the CLI (ping, status, perf, nc,
// socks, forward, expose) uses. It owns the agent's lifecycle, its
// built-in echo and sink services, the server side of the control
// protocol and the services it offers other nodes; connection setup is
// package vconn's. The protocol's schema, its sockets and its client are
// package agent/control's, the answers' shapes package status's (as
// tailscale's ipn/localapi serves client/local over ipn/ipnstate).
//
// The control API is HTTP with JSON bodies over a unix socket, served only
// to the agent's own uid and root, checked by SO_PEERCRED on every
// connection (control.go: Guard, which the hub's status socket uses too).
// Root's agent listens on the abstract socket "@gridlink-agent", which
// Linux scopes to the network namespace: one system agent per host, also
// in the lab; any other user's agent on a socket of that user
// (control.UserControl), in a directory the agent makes or checks.
//
// Programs that do not link gridlink go through the agent: a stream
// request (stream.go) upgrades its control connection into the bytes of
// an overlay link (connect), of a bind's one peer, or keeps an exposed
// service published while it stays open. So gridlink nc, forward and socks
// start no node of their own and use the agent's method cache, spares and
// hub session. Their connects hand the agent their local end (a socket,
// or nc's stdin and stdout) as file descriptors, so that the agent copies
// it to the link without them (handoff.go; BENCHMARKS.md, unmodified
// applications); the agent remembers why each stream ended
// (streamend.go). Connection setups run in turns of MaxSetups
// (setups.go). Every agent also answers on its service directory port
// (services.go) and, only with AllowExit, on the exit port (exit.go),
// which dials ordinary TCP hosts for SOCKS clients elsewhere: public
// ones, private ones only as ExitAllow lists them, never this host's own
// (exitpolicy.go); each exit logged and counted (exitcount.go).
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

// EchoPort is the virtual port of every agent's echo service.
const EchoPort = 7

// Config configures an agent.
type Config struct {
	Node vconn.Config
	// Control is the control socket; default control.OwnControl:
	// control.DefaultControl for root, control.UserControl for anyone else.
	Control string
	// AllowExit serves the exit service (ExitPort): other nodes' SOCKS
	// clients may then reach public TCP addresses from this host, and the
	// private ones ExitAllow lists; never this host's own (loopback,
	// link-local, its interfaces' addresses: exitpolicy.go). Off by
	// default.
	AllowExit bool
	// ExitAllow lists the private addresses (and their ports) exits may
	// reach; none by default.
	ExitAllow []ExitRule
	// ExitPerMember bounds the exits one member (by its certificate's
	// subject, or its ID in an open grid) may have open at once; zero:
	// DefaultExitPerMember.
	ExitPerMember int
	// Credentials reports the node's credentials and their lifetimes for
	// its status and doctor (the API watches the files); nil: none.
	Credentials func() []status.Credential
	// exitNet replaces the host's resolver and TCP for the exit service
	// (tests: no packet leaves loopback).
	exitNet *exitNet
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
	// links are the connect streams' links while they run (links.go).
	links streamLinks
	// refused logs a refused control request.
	refused func(format string, args ...any)
	// more adds what services above the agent report (SetStatus).
	more statusHook
	// creds reports the node's credentials (Config.Credentials).
	creds func() []status.Credential
	// vip is the handed device of gridlink vip exec (vipdevice.go).
	vip vipDevices
	// exits is the exit service; nil without Config.AllowExit.
	exits *exitService
}

// Start brings the node up and serves the control API and echo service.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Control == "" {
		cfg.Control = control.OwnControl()
		if cfg.Control != control.DefaultControl {
			if err := prepareSocketDir(filepath.Dir(cfg.Control), os.Geteuid()); err != nil {
				return nil, err
			}
		}
	}
	node, err := vconn.Start(ctx, cfg.Node)
	if err != nil {
		return nil, err
	}
	a := &Agent{node: node, control: cfg.Control, logf: cfg.Node.Logf, creds: cfg.Credentials}
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
		xn := hostNet
		if cfg.exitNet != nil {
			xn = *cfg.exitNet
		}
		a.exits = &exitService{node: node.Name(), net: xn, logf: a.refusalLog(cfg.Node.Logf),
			policy: exitPolicy{allow: cfg.ExitAllow, virtual: cfg.Node.Hide},
			slots:  exitSlots{max: cfg.ExitPerMember},
			count:  exitCounters{refusals: make([]atomic.Uint64, len(status.ExitRefusalReasons))}}
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
	mux.HandleFunc("POST "+control.VIPDevicePath, a.vipDevice)
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

func (a *Agent) status(w http.ResponseWriter, r *http.Request) {
	st := status.Agent{Node: a.node.Machine(), Attach: a.node.AttachState(), Conns: conns(a.node), Cache: map[string]string{}, NAT: natInfo(a.node), PortMap: portMapInfo(a.node)}
	if s := a.node.Session(); s != nil {
		st.Observed = s.Observed().String()
		idx, of, returns := s.HubChoice()
		st.HubChoice, st.Hubs, st.NoReturn = idx+1, of, !returns
	}
	for hub, m := range a.node.CachedMethods() {
		st.Cache[hub.Short()] = string(m)
	}
	st.Links = a.links.status()
	st.Credentials = a.credentials()
	a.more.fill(&st)
	writeJSON(w, st)
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
	var req control.PingRequest
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
	res := status.Ping{Addr: addr}
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

// conns lists n's open virtual connections as /status reports them.
func conns(n *vconn.Node) []status.Conn {
	var out []status.Conn
	for _, c := range n.Conns() {
		out = append(out, status.Conn{Local: c.Local, Remote: c.Remote, Method: string(c.Method), SentBytes: c.SentBytes, ReceivedBytes: c.ReceivedBytes})
	}
	return out
}
