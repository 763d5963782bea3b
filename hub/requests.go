package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// RoutedTTL is the TTL of routed messages a hub or node originates.
const RoutedTTL = 16

// openTTL is how many hubs an open may cross.
const openTTL = 16

// Open opens a circuit to port on the target node (to.ID, at hub to.Hub;
// zero Hub: a node of our own hub). It returns at once, without waiting
// for the accept, so the caller can pipeline its first bytes (e.g. a TLS
// ClientHello): Write works at once, up to wire.InitialWindow bytes before
// the accept. Read waits for the accept and data. A refusal surfaces from
// Read and Write as an error wrapping direct.ErrRefused (the target refused) or
// ErrUnreachable (a hub could not reach it), with the reason.
func (s *Session) Open(ctx context.Context, to identity.Machine, port uint16) (*Circuit, error) {
	if to.ID.IsZero() {
		return nil, errors.New("hub: open: no target node")
	}
	sl, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.openOn(sl, to, port)
}

func (s *Session) openOn(sl *slink, to identity.Machine, port uint16) (*Circuit, error) {
	me := s.cfg.Machine
	me.Hub, me.HubName = sl.hub.ID, sl.hub.Name
	c := newCircuit(sl, 0, false, machineAddr(me, 0), machineAddr(to, port))
	c.credit = wire.InitialWindow // what we may send before the accept
	o := &wire.Open{From: me, ToHub: to.Hub, ToNode: to.ID, Port: port, TTL: openTTL, Window: uint32(c.rwin)}
	payload, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	sl.mu.Lock()
	if sl.circuits == nil {
		sl.mu.Unlock()
		return nil, fmt.Errorf("%w: hub link to %s lost", ErrReset, sl.hub.Name)
	}
	c.id = sl.allocLocked()
	sl.circuits[c.id] = c
	// Sending under sl.mu keeps opens in circuit-number order.
	ok := sl.t.Send(wire.TOpen, 0, c.id, payload)
	sl.mu.Unlock()
	if !ok {
		sl.remove(c)
		return nil, fmt.Errorf("%w: hub link to %s lost", ErrReset, sl.hub.Name)
	}
	return c, nil
}

func (sl *slink) allocLocked() uint32 {
	for {
		id := sl.nextCirc
		if sl.nextCirc >= 1<<32-3 {
			sl.nextCirc = FirstCircuit(true)
		} else {
			sl.nextCirc += 2
		}
		if _, used := sl.circuits[id]; !used {
			return id
		}
	}
}

// remove forgets a circuit.
func (sl *slink) remove(c *Circuit) {
	sl.mu.Lock()
	if sl.circuits[c.id] == c {
		delete(sl.circuits, c.id)
	}
	sl.mu.Unlock()
	c.mu.Lock()
	c.removed = true
	if c.linger != nil {
		c.linger.Stop()
	}
	c.mu.Unlock()
}

// Lookup asks the hubs for the nodes named node (a name or an ID text);
// each Machine comes with Hub and HubName. No match is a *NotFoundError
// (errors.Is ErrNotFound) naming the hubs that could not be asked.
func (s *Session) Lookup(ctx context.Context, node string) ([]identity.Machine, error) {
	if node == "" || len(node) > 64 {
		return nil, fmt.Errorf("hub: lookup: bad node name %q", node)
	}
	sl, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan *wire.Found, 1)
	s.mu.Lock()
	s.nextQ++
	q := s.nextQ
	s.lookups[q] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lookups, q)
		s.mu.Unlock()
	}()
	sl.t.SendControl(&wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: q, Node: node}})
	select {
	case f := <-ch:
		if len(f.Matches) == 0 {
			return nil, &NotFoundError{Node: node, Hub: sl.hub.Name, Answered: f.Answered, Unreached: f.Unreached}
		}
		return f.Matches, nil
	case <-sl.t.Done():
		return nil, fmt.Errorf("hub: lookup %s: hub link to %s lost", node, sl.hub.Name)
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("hub: lookup %s: %w", node, ctx.Err())
	}
}

// Send sends m to node toNode at hub toHub (zero toNode: to the hub
// itself; zero toHub: a node of our own hub) as a routed message. Delivery
// is not confirmed; an undeliverable reverse request or splice offer comes
// back as a reverse-fail or splice-fail message (wire.Fail names why).
func (s *Session) Send(ctx context.Context, toHub, toNode identity.ID, m *wire.Message) error {
	if m == nil {
		return errors.New("hub: send: no message")
	}
	sl, err := s.current(ctx)
	if err != nil {
		return err
	}
	env := &wire.Message{Kind: wire.KRouted, Routed: &wire.Routed{FromHub: sl.hub.ID, FromNode: s.cfg.Machine.ID,
		ToHub: toHub, ToNode: toNode, TTL: RoutedTTL, Msg: m}}
	b := wire.Encode(env)
	// The hub would close our link over a message it cannot decode: check
	// it here instead.
	if len(b) > wire.MaxControl {
		return fmt.Errorf("hub: send %s: message of %d bytes, more than %d", m.Kind, len(b), wire.MaxControl)
	}
	if _, err := wire.Decode(b); err != nil {
		return fmt.Errorf("hub: send %s: %w", m.Kind, err)
	}
	if !sl.t.Send(wire.TControl, 0, 0, b) {
		return fmt.Errorf("hub: send %s: hub link to %s lost", m.Kind, sl.hub.Name)
	}
	return nil
}

// Hubs asks the hub for the hubs it knows, itself first.
func (s *Session) Hubs(ctx context.Context) ([]wire.RouteAd, error) {
	sl, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.hubsOn(ctx, sl)
}

// hubsOn asks the hub of link sl for the hubs it knows.
func (s *Session) hubsOn(ctx context.Context, sl *slink) ([]wire.RouteAd, error) {
	ch := make(chan []wire.RouteAd, 1)
	s.mu.Lock()
	s.nextQ++
	q := s.nextQ
	s.hubQueries[q] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.hubQueries, q)
		s.mu.Unlock()
	}()
	sl.t.SendControl(&wire.Message{Kind: wire.KHubs, Hubs: &wire.HubsQuery{Query: q}})
	select {
	case hubs := <-ch:
		return hubs, nil
	case <-sl.t.Done():
		return nil, fmt.Errorf("hub: hub list: hub link to %s lost", sl.hub.Name)
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("hub: hub list: %w", ctx.Err())
	}
}
