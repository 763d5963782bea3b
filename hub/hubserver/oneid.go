package hubserver

import (
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/wire"
)

// One attachment per identity (the rule and its wire side:
// wire/instance.go). Two processes with one node ID used to evict each
// other here without end (issue 33: a user's agent and `gridlink cp`
// with her proxy, 7,883 "replaced by a new link" lines in 20 s). Now a
// node whose identity is attached here already is admitted in the
// holder's place only if it is the same process (its hello's Instance
// is the holder's) or the holder does not answer a ping within aliveWait
// (it is closed as gone silent); else it is refused for good, naming the
// holder on both ends, and the holder carries on undisturbed. register
// refuses a newcomer whose holder changed while it was judged (another
// newcomer got there first): so of any number of processes at most one
// replaces a silent holder, and no two take turns.
//
// Only this hub's holder is judged: a second process with the identity
// attached at another hub is not refused (claims between hubs carry
// names, and only nodes of other identities are judged by them).

// aliveWait bounds the wait for a frame from a node's attachment before
// another process with its identity takes its place: a restarted node is
// admitted within it.
const aliveWait = time.Second

// admitIdentity decides whether node p may take its identity's place at
// this hub: nil admits it (p.replaces is the holder it replaces, if any:
// closed, silent and now closed, or its own process's), else the refusal
// naming the live holder. It may wait aliveWait.
func (h *Hub) admitIdentity(p *peer) *hub.RefusedError {
	if p.isHub {
		return nil
	}
	h.mu.Lock()
	old := h.nodes[p.id]
	moved := old != nil && !old.movedTo.IsZero()
	h.mu.Unlock()
	p.replaces = old
	switch {
	case old == nil || old.t.IsClosed():
		return nil
	case p.instance == "" && moved:
		// a node older than wire.VersionInstance that moved to another
		// hub keeps its link here while its circuits carry on, and
		// answers on it: coming back, it is let in as before
		return nil
	case p.instance != "" && subtle.ConstantTimeCompare([]byte(p.instance), []byte(old.instance)) == 1:
		h.logf("hub %s: %s re-attached from %s (the same process: its hello names the holder's instance): its old link is replaced", h.cfg.Name, old.t.Desc(), p.t.Remote())
		return nil
	case !old.t.Answers(aliveWait):
		err := fmt.Errorf("gone silent: nothing heard within %v of a ping, while another process with its identity attached from %s", aliveWait, p.t.Remote())
		h.logf("hub %s: %s: %v; that one takes its place", h.cfg.Name, old.t.Desc(), err)
		old.t.Close(err)
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attachedRefusalLocked(old, p)
}

// attachedRefusalLocked refuses node p, whose identity live node old
// holds here: code wire.RefusedAttached, or wire.RefusedNameTaken for a
// node older than wire.VersionInstance (its decoder knows no newer code;
// that one too it takes for a refusal for good). h.mu is held.
func (h *Hub) attachedRefusalLocked(old, p *peer) *hub.RefusedError {
	code := wire.RefusedAttached
	if p.version < wire.VersionInstance {
		code = wire.RefusedNameTaken
	}
	who := "node " + old.id.Short()
	if old.name != old.id.Short() {
		who = fmt.Sprintf("node %s (%s)", old.name, old.id.Short())
	}
	return &hub.RefusedError{Code: code, Holder: old.machine,
		Reason: fmt.Sprintf("another process with this identity, %s, already runs at %s (attached to hub %s since %s, and it answers)",
			who, old.t.Remote(), h.cfg.Name, old.since.UTC().Format(time.RFC3339))}
}
