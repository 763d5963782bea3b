package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
)

// Config configures a dashboard. The zero value works: on a free port of
// 127.0.0.1, a fresh token, the caller's agent (as the CLI finds it), the
// hub status socket of this host (gridlink.HubControl), updates every
// second, copies as an open grid's node with a fresh key, logging to
// slog.Default().
type Config struct {
	// Listen is the address, HOST:PORT with a loopback HOST (127.0.0.1,
	// ::1, localhost); empty: 127.0.0.1:0. Others are refused
	// (ErrNotLoopback).
	Listen string
	// Token is the secret every request needs (see auth.go); empty: 32
	// random bytes.
	Token string
	// Control is the agent's control socket; empty: the caller's own
	// agent, else the system agent (control.Dial("")).
	Control string
	// Hubs are the hub status sockets read for the overlay map (each
	// hub's routes, links and nodes); nil: gridlink.HubControl.
	Hubs []string
	// Copy is what every transfer started from the page runs with: its
	// node (Node: credentials, hubs; each transfer's node is named
	// Node.Name, else Node.FallbackName, with -tN added), the user's
	// proxy that pushes delegate from (ProxyFile), the services' port
	// and the link options. Its per-copy fields are the page's.
	Copy gridlink.CopyConfig
	// Interval is how often the state is pushed to the pages (server-sent
	// events); zero: a second.
	Interval time.Duration
	// History is how many ended transfers are kept; zero: 100.
	History int
	// Logger receives refusals and failures; nil: slog.Default().
	Logger *slog.Logger
	// Members opens the dashboard to the grid's members too, over HTTPS
	// with their certificates (members.go); zero: the local user only.
	Members MembersConfig
}

// Server is a running dashboard.
type Server struct {
	cfg    Config
	ln     net.Listener
	port   string
	token  string
	log    *slog.Logger
	agent  *control.Client
	xfers  *transfers
	rates  *rates
	page   *template.Template
	events *broker
	// members is the grid members' listener; nil without Config.Members.
	members *members
	ctx     context.Context
	stop    context.CancelFunc
}

// New listens and prepares the dashboard; Serve serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen address %q: %w", cfg.Listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: %q", ErrNotLoopback, cfg.Listen)
	}
	if cfg.Token == "" {
		cfg.Token = newToken()
	}
	if cfg.Hubs == nil {
		cfg.Hubs = []string{gridlink.HubControl}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.History <= 0 {
		cfg.History = 100
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, err
	}
	mem, err := newMembers(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if mem != nil {
			mem.ln.Close()
		}
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	ctx, stop := context.WithCancel(context.Background())
	base := cfg.Copy
	name := base.Node.Name
	if name == "" {
		name = base.Node.FallbackName
	}
	if name == "" {
		name = fmt.Sprintf("dashboard-%s-%d", gridlink.HostName(), os.Getpid())
	}
	base.Node.Name = name
	base.Progress, base.Hold = nil, nil
	s := &Server{cfg: cfg, ln: ln, port: port, token: cfg.Token, log: log, agent: control.Dial(cfg.Control), page: page,
		xfers: newTransfers(ctx, base, cfg.History, gridlink.Copy), events: newBroker(), rates: newRates(), members: mem, ctx: ctx, stop: stop}
	return s, nil
}

// URL is the address to open: the dashboard with its token.
func (s *Server) URL() string {
	return fmt.Sprintf("http://%s/?%s=%s", s.ln.Addr(), TokenParam, s.token)
}

// Addr is where the dashboard listens.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves the dashboard until ctx is done; then it cancels the
// transfers still running and waits for them.
func (s *Server) Serve(ctx context.Context) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ConnContext: peerContext}
	go s.publish()
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(s.ln) }()
	servers := []*http.Server{hs}
	if s.members != nil {
		ms := &http.Server{Handler: s.membersHandler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: s.members.tlsConfig(),
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
		servers = append(servers, ms)
		go func() { errc <- ms.ServeTLS(s.members.ln, "", "") }()
		if s.members.watch {
			go s.members.trust.Watch(s.ctx, 0, func(f string, args ...any) { s.log.Info("dashboard: members: " + fmt.Sprintf(f, args...)) })
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.close()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, h := range servers {
		_ = h.Shutdown(sctx)
	}
	return err
}

// close stops the updates and the transfers.
func (s *Server) close() {
	s.stop()
	s.events.close()
	s.xfers.close()
}

// Handler is the dashboard's HTTP handler, every route behind the token
// (guard).
func (s *Server) Handler() http.Handler {
	return s.guard(s.routes())
}

// routes are the dashboard's pages and API, for the local user (Handler)
// and members (membersHandler) alike.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.HandleFunc("GET /{$}", s.index)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/state", s.stateJSON)
	mux.HandleFunc("GET /events", s.stream)
	mux.HandleFunc("POST /api/transfers", s.startTransfer)
	mux.HandleFunc("POST /api/transfers/action", s.actTransfers)
	return mux
}

// pageData is what the page is made with: the token its script sends
// with changes; for a member, who signed on and whether it may change
// transfers.
type pageData struct {
	Token    string
	Member   string
	ReadOnly bool
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	data := pageData{Token: s.token}
	if m := memberOf(r.Context()); m != nil {
		data = pageData{Token: m.token, Member: m.chain.Subject(), ReadOnly: s.members.mayChange(m.chain) != ""}
	}
	if err := s.page.Execute(w, data); err != nil {
		s.log.Error("dashboard: page", "err", err)
	}
}

func (s *Server) stateJSON(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.state(r.Context()))
}

// maxBody bounds a request's JSON body.
const maxBody = 64 << 10

func decodeBody(r *http.Request, v any) error {
	d := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

func (s *Server) startTransfer(w http.ResponseWriter, r *http.Request) {
	var req TransferRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	for i := range req.Srcs {
		req.Srcs[i] = strings.TrimSpace(req.Srcs[i])
	}
	req.Dst = strings.TrimSpace(req.Dst)
	id, err := s.xfers.start(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	s.log.Info("dashboard: transfer started", "id", id, "srcs", req.Srcs, "dst", req.Dst, "by", by(r))
	s.events.kick()
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

func (s *Server) actTransfers(w http.ResponseWriter, r *http.Request) {
	var req ActionRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	res, err := s.xfers.act(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	s.log.Info("dashboard: transfers", "action", req.Action, "ids", req.IDs, "results", res.Results, "by", by(r))
	s.events.kick()
	writeJSON(w, http.StatusOK, res)
}

// by names who asked for a change: the local user, or a member's subject.
func by(r *http.Request) string {
	if m := memberOf(r.Context()); m != nil {
		return m.chain.Subject()
	}
	return "the local user"
}

// errorBody is an API error's JSON form.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
