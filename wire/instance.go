package wire

import (
	"fmt"
)

// One attachment per identity (issue 33). Two processes with one
// identity (a user's agent and a `gridlink cp` with the same proxy, root's
// agent and a command with the node's key) used to evict each other at
// their hub without end: a newcomer always replaced the holder, and the
// holder re-attached at once. Now a hub keeps one attachment per node ID:
//
//   - a hello whose Instance is the holder's is the same process coming
//     back (its old link half-dead: the node gave up on it, the hub has not
//     noticed yet): it replaces the holder at once;
//   - otherwise the hub pings the holder and waits a bounded time (package
//     hubserver's aliveWait, 1 s) for any frame from it: silent, it is
//     closed as gone and the newcomer admitted (a process that restarted);
//     answering, the newcomer is refused (RefusedAttached, naming the
//     holder: its observed address, the hub, since when), and stops.
//
// Hello.Instance is InstanceSize lowercase hex digits a node draws at
// random when its session starts, the same for every hub it attaches to.
// It lets its holder replace a live attachment at once, so it is a secret
// of the process: it travels only in the hello's sealed control frame,
// and hubs neither log it nor pass it on.
// Nodes of VersionInstance or later send it; a hub's strict decoder before
// VersionInstance would close the link over the unknown field, so a node
// that sent it and had its link closed before the hub's hello sends none
// to that hub again (package hub's attach). A hello without one (an older
// node, or such a hub) never matches: the holder's liveness decides, but
// a holder that said it moved to another hub (KMoved) and keeps its link
// for its circuits is replaced as before (it is likely that node, back).
const (
	// VersionInstance is the first protocol version (Hello.Version) whose
	// nodes say which process they are (Hello.Instance) and whose hubs
	// refuse a second live attachment of one identity (RefusedAttached).
	VersionInstance = 7
	// InstanceSize is the length of Hello.Instance: 16 random bytes in
	// lowercase hex.
	InstanceSize = 32
	// RefusedAttached: another process with the node's identity is
	// attached to the hub and answers (Refusal.Holder names it, with the
	// hub). Sent to nodes of VersionInstance or later; an older node,
	// whose decoder knows no such code, is sent RefusedNameTaken with the
	// same holder and words (its nearest refusal for good).
	RefusedAttached = "attached"
)

// checkInstance checks a hello's Instance: only a node's, empty or
// InstanceSize lowercase hex digits.
func (h *Hello) checkInstance() error {
	if h.Instance == "" {
		return nil
	}
	if h.Role != "node" {
		return fmt.Errorf("a %s's hello carries a process instance: only nodes have one", h.Role)
	}
	if len(h.Instance) != InstanceSize {
		return fmt.Errorf("instance of %d characters, want %d", len(h.Instance), InstanceSize)
	}
	for _, c := range h.Instance {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("instance %q is not lowercase hex", h.Instance)
		}
	}
	return nil
}
