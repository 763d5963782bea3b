package hub

import (
	"fmt"

	"github.com/gridlink/gridlink/wire"
)

// handle dispatches a frame from the hub to the session. An error is a
// protocol violation: the link is closed (and the session re-attaches).
func (sl *slink) handle(f wire.Frame) error {
	s := sl.s
	switch f.Type {
	case wire.TControl:
		m, err := wire.Decode(f.Payload)
		if err != nil {
			return err
		}
		switch m.Kind {
		case wire.KFound:
			s.mu.Lock()
			if ch := s.lookups[m.Found.Query]; ch != nil {
				select {
				case ch <- m.Found:
				default:
				}
			}
			s.mu.Unlock()
		case wire.KHubList:
			s.mu.Lock()
			if ch := s.hubQueries[m.HubList.Query]; ch != nil {
				select {
				case ch <- m.HubList.Hubs:
				default:
				}
			}
			s.mu.Unlock()
		case wire.KRouted:
			s.mu.Lock()
			if !s.closed {
				select {
				case s.messages <- m.Routed:
				default:
					s.logf("hub: node %s: routed %s message from %s dropped: Messages() not drained", s.cfg.Machine, m.Routed.Msg.Kind, m.Routed.FromNode.Short())
				}
			}
			s.mu.Unlock()
		case wire.KVirtualAck:
			sl.virtualAck(m.VirtualAck)
		case wire.KRefused:
			// the hub gave our name to another node: the link ends with
			// its refusal, which maintain does not retry.
			e := refusedBy(sl.hub.Name, m.Refusal)
			s.logf("hub: node %s: %v", s.cfg.Machine, e)
			return e
		default:
			return fmt.Errorf("unexpected %s message from a hub", m.Kind)
		}
		return nil
	case wire.TOpen:
		return sl.incomingOpen(f)
	}
	sl.mu.Lock()
	c := sl.circuits[f.Circuit]
	sl.mu.Unlock()
	if c == nil {
		return nil // gone: late frames are dropped
	}
	switch f.Type {
	case wire.TAccept:
		a, err := wire.DecodeAccept(f.Payload)
		if err != nil {
			return err
		}
		if err := c.onAccept(a); err != nil {
			sl.resetCircuit(c, err.Error())
		}
	case wire.TData:
		var body *[]byte // the payload's buffer, kept rather than copied (buffer.go)
		if len(f.Payload) >= KeepAbove {
			body = f.Keep()
		}
		if err := c.onData(f.Payload, body); err != nil {
			sl.resetCircuit(c, err.Error())
		}
	case wire.TWindow:
		n, err := wire.DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		c.onWindow(n)
	case wire.TFin:
		if c.onFin() {
			sl.remove(c)
		}
	case wire.TReset:
		c.onReset(f)
		sl.remove(c)
	case wire.TPing:
		sl.t.Send(wire.TPong, 0, f.Circuit, f.Payload)
	case wire.TPong:
		c.onPong(f.Payload)
	}
	return nil
}

// resetCircuit aborts a circuit whose peer broke the protocol.
func (sl *slink) resetCircuit(c *Circuit, reason string) {
	c.fail(fmt.Errorf("%w: %s", ErrReset, reason))
	sl.t.Send(wire.TReset, 0, c.id, []byte(reason))
	sl.remove(c)
}

// incomingOpen takes a circuit opened toward us.
func (sl *slink) incomingOpen(f wire.Frame) error {
	if f.Circuit%2 == 1 {
		return fmt.Errorf("open on circuit %d: odd numbers are ours", f.Circuit)
	}
	o, err := wire.DecodeOpen(f.Payload)
	if err != nil {
		return err
	}
	s := sl.s
	me := s.cfg.Machine
	me.Hub, me.HubName = sl.hub.ID, sl.hub.Name
	c := newCircuit(sl, f.Circuit, true, machineAddr(me, o.Port), machineAddr(o.From, 0))
	c.credit = int64(o.Window)
	sl.mu.Lock()
	if sl.circuits == nil {
		sl.mu.Unlock()
		return nil
	}
	if sl.circuits[f.Circuit] != nil {
		sl.mu.Unlock()
		return fmt.Errorf("open on circuit %d, which is in use", f.Circuit)
	}
	sl.circuits[f.Circuit] = c
	sl.mu.Unlock()
	queued := false
	s.mu.Lock()
	if !s.closed {
		select {
		case s.incoming <- &Incoming{Circuit: c, Open: o}:
			queued = true
		default:
		}
	}
	s.mu.Unlock()
	if !queued {
		(&Incoming{Circuit: c, Open: o}).Refuse(fmt.Sprintf("connection refused: %s is not taking connections (Incoming not drained)", me))
	}
	return nil
}
