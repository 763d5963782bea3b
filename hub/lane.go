package hub

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/gridlink/gridlink/wire"
)

// Lanes: the further TCP connections of a trunk between two hubs (wire
// format and rules: wire/lane.go). Package hub holds what proves a lane
// belongs to a trunk; package hubserver dials, accepts and uses them.

const (
	// laneLabel names the secret each connection of a trunk exports from
	// its TLS session (RFC 8446 §7.5): the first connection's is the
	// trunk's secret, a further connection's binds its proof to it.
	laneLabel = "gridlink hub trunk lanes v1"
	// laneProofContext starts the message a lane proof authenticates.
	laneProofContext = "gridlink lane proof v1"
)

// LaneSecret is the secret this connection's TLS session exports for
// lanes: on a trunk's first connection the trunk's secret, which only its
// two ends know; on a further connection what its proof is bound to.
func (l *Secured) LaneSecret() ([]byte, error) {
	if l.TLS == nil {
		return nil, errors.New("hub: no TLS session to export a lane secret from")
	}
	st := l.TLS.ConnectionState()
	k, err := st.ExportKeyingMaterial(laneLabel, nil, wire.LaneProofSize)
	if err != nil {
		return nil, fmt.Errorf("hub: lane secret: %w", err)
	}
	return k, nil
}

// LaneProof is the proof that the connection whose lane secret is lane
// joins the trunk whose secret is trunk (wire.LaneJoin.Proof).
func LaneProof(trunk, lane []byte) []byte {
	m := hmac.New(sha256.New, trunk)
	m.Write([]byte(laneProofContext))
	m.Write(lane)
	return m.Sum(nil)
}

// CheckLaneProof reports whether proof joins the connection whose lane
// secret is lane to the trunk whose secret is trunk (in constant time).
func CheckLaneProof(trunk, lane, proof []byte) bool {
	return len(trunk) > 0 && hmac.Equal(proof, LaneProof(trunk, lane))
}
