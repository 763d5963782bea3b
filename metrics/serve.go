package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultHost is the host an address without one is bound to: the
// metrics endpoint answers anyone who can reach it, so it stays on this
// host unless an address says otherwise (0.0.0.0:PORT, an interface's
// address).
const DefaultHost = "127.0.0.1"

// Registry holds cs and the Go runtime's and the process's collectors
// (go_*, process_*).
func Registry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Handler serves g's metrics in the exposition formats Prometheus asks
// for (text by default).
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// AddrError is a metrics address that is none of HOST:PORT, :PORT or
// PORT.
type AddrError struct{ Addr string }

func (e *AddrError) Error() string {
	return fmt.Sprintf("metrics address %q: want HOST:PORT, :PORT or PORT", e.Addr)
}

// Addr completes addr: HOST:PORT as given, :PORT or PORT on DefaultHost;
// anything else is an *AddrError.
func Addr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if !errors.As(err, &ae) || strings.ContainsAny(addr, ":[]") {
			return "", &AddrError{Addr: addr}
		}
		host, port = "", addr // a bare port
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return "", &AddrError{Addr: addr}
	}
	if host == "" {
		host = DefaultHost
	}
	return net.JoinHostPort(host, port), nil
}

// Server is a running /metrics endpoint.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds the metrics endpoint to addr (see Addr); Serve starts
// answering there.
func Listen(addr string) (*Server, error) {
	full, err := Addr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", full)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	return &Server{ln: ln, srv: &http.Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}}, nil
}

// Serve answers GET /metrics, in the background until Close, from a
// Registry of cs.
func (s *Server) Serve(cs ...prometheus.Collector) error {
	reg, err := Registry(cs...)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(reg))
	s.srv.Handler = mux
	go s.srv.Serve(s.ln)
	return nil
}

// Addr is where the endpoint listens.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the endpoint (or closes its listener, if it never served),
// letting scrapes in progress finish for a second.
func (s *Server) Close() error {
	if s.srv.Handler == nil {
		return s.ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
