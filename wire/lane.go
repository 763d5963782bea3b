package wire

import "fmt"

// A trunk between two hubs may carry several TCP connections ("lanes"):
// one TCP connection across a long, lossy path carries a fraction of what
// the path does, and every circuit between two hubs would otherwise share
// it. The first connection is the trunk as before (hellos, control,
// routing); every further one carries circuit frames only.
//
// Agreement: both hellos of the trunk carry Version VersionLanes or later.
// A hub or node of an older version sends and receives Version 2 and its
// trunk keeps one connection; nothing else on the wire changes for it.
//
// Joining: the hub that dialled the trunk dials the same address again,
// runs the full TLS handshake (the peer must prove the same hub identity)
// and sends, in place of an ordinary hello, a hello with Lane set:
//
//	{"kind":"hello","hello":{"role":"hub","machine":{…},"version":3,
//	  "lane":{"proof":"<base64 of 32 bytes>"}}}
//
// proof = HMAC-SHA256(trunk secret, "gridlink lane proof v1" || lane secret)
// where the trunk secret is 32 bytes exported from the first connection's
// TLS session (RFC 8446 §7.5, label "gridlink hub trunk lanes v1") and the
// lane secret 32 bytes exported from the new connection's (the same
// label): only the two ends of that trunk know the first, and the second
// binds the proof to this connection, so it cannot be replayed elsewhere.
// The accepting hub answers with its ordinary hello, or refuses the lane
// (KRefused, code RefusedLane) naming why: no trunk from that hub, a
// trunk it dialled itself, a wrong proof, too many lanes.
//
// Circuits on lanes: the end that opens a circuit on a trunk picks the
// lane its TOpen goes on; every later frame of that circuit, both ways,
// goes on the same lane, so each circuit's frames stay in order. A lane
// that fails takes its circuits with it (reset as if the trunk were lost);
// the first connection's failure ends the trunk and every lane.
const (
	// VersionLanes is the first protocol version whose hubs carry a trunk
	// over several connections.
	VersionLanes = 3
	// LaneProofSize is the size of LaneJoin.Proof.
	LaneProofSize = 32
	// RefusedLane: a hub refused a connection that asked to join a trunk
	// as one of its lanes (Refusal.Reason says why).
	RefusedLane = "lane"
)

// LaneJoin is the body of a hello that asks to join the sender's trunk to
// the receiving hub as a further connection.
type LaneJoin struct {
	Proof []byte `json:"proof"` // LaneProofSize bytes, see above
}

func (h *Hello) checkLane() error {
	if h.Lane == nil {
		return nil
	}
	if h.Role != "hub" {
		return fmt.Errorf("a %s's hello asks to join a trunk's lanes: only hubs have them", h.Role)
	}
	if len(h.Lane.Proof) != LaneProofSize {
		return fmt.Errorf("lane proof of %d bytes, want %d", len(h.Lane.Proof), LaneProofSize)
	}
	if h.Version < VersionLanes {
		return fmt.Errorf("lane join with version %d, want %d or later", h.Version, VersionLanes)
	}
	return nil
}
