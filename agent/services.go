package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/vconn"
)

// ServicesPort is the virtual port of every agent's service directory:
// the names given to exposed services (gridlink expose --name), so that
// others dial NODE:NAME instead of NODE:PORT.
//
// Directory protocol, on a plain virtual connection: the asker sends an
// event line {"service":"NAME"}; the directory answers {"bound":"NODE:PORT"}
// or {"error":...,"kind":"refused"} and closes. A restricted proxy may
// ask wherever its restriction reaches the node (vconn.DirectoryPort).
const ServicesPort = vconn.DirectoryPort

// wellKnown are the services every agent has, resolved without asking.
var wellKnown = map[string]uint16{"echo": EchoPort}

// services is an agent's directory.
type services struct {
	mu    sync.Mutex
	ports map[string]uint16
}

// add names port; the returned func removes the name.
func (s *services) add(name string, port uint16) (func(), error) {
	if pa, err := identity.ParseAddr("x:" + name); err != nil || pa.Service != name || wellKnown[name] != 0 {
		return nil, fmt.Errorf("service name %q: want a letter, then letters, digits and '-', not a well-known name", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports == nil {
		s.ports = map[string]uint16{}
	}
	if p, ok := s.ports[name]; ok {
		return nil, fmt.Errorf("service name %q is already taken (port %d)", name, p)
	}
	s.ports[name] = port
	return func() {
		s.mu.Lock()
		delete(s.ports, name)
		s.mu.Unlock()
	}, nil
}

func (s *services) port(name string) (uint16, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[name]
	return p, ok
}

// answer serves one directory request.
func (a *Agent) answer(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	ev, err := control.ReadEvent(c)
	if err != nil {
		return
	}
	if p, ok := a.services.port(ev.Service); ok {
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Bound: identity.Addr{Node: a.node.Name(), Port: p}.String()}))
		return
	}
	_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: fmt.Sprintf("no service %q at %s", ev.Service, a.node.Name()), Kind: control.KindRefused}))
}

// resolveService turns NODE:NAME (NAME a service name) into NODE:PORT,
// asking NODE's directory unless NAME is well known.
func (a *Agent) resolveService(ctx context.Context, va identity.Addr) (string, error) {
	if va.Service == "" {
		return va.String(), nil
	}
	if p := wellKnown[va.Service]; p != 0 {
		va.Service, va.Port = "", p
		return va.String(), nil
	}
	name := va.Service
	dir := va
	dir.Service, dir.Port = "", ServicesPort
	c, err := a.node.Dial(ctx, dir.String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	var ev control.Event
	if _, err = c.Write(control.AppendEvent(nil, control.Event{Service: name})); err == nil {
		ev, err = control.ReadEvent(c)
	}
	if err != nil {
		return "", fmt.Errorf("service %q at %s: %w", name, va.Node, err)
	}
	b, err := identity.ParseAddr(ev.Bound)
	if ev.Bound == "" || err != nil || b.Port == 0 {
		return "", &control.StreamError{Kind: orElse(ev.Kind, control.KindFailed), Msg: orElse(ev.Error, fmt.Sprintf("service %q at %s: bad answer %q", name, va.Node, ev.Bound))}
	}
	va.Service, va.Port = "", b.Port
	return va.String(), nil
}

// orElse is s, or def if s is empty.
func orElse(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
