package vconn

import (
	"context"
	"net"

	"github.com/gridlink/gridlink/identity"
)

// routedMethod: a circuit through the hubs relays the data hub to hub; it
// works whenever both ends are attached and the hubs have a route, so it
// stands by for the others.
type routedMethod struct{}

func (routedMethod) rank() int      { return 3 }
func (routedMethod) needsHub() bool { return true }

// headStarts: routed starts two head starts after direct.
func (routedMethod) headStarts() int { return 2 }

// setupTrips: one round trip of the path (the circuit's open and the
// handshake share it).
func (routedMethod) setupTrips() int { return 2 }

func (routedMethod) possible(*Node, identity.Machine) error { return nil }

func (routedMethod) plausible(*Node, identity.Machine, reach) bool { return true }

func (routedMethod) attempt(ctx context.Context, n *Node, target identity.Machine, port uint16, _ int) (net.Conn, bool, error) {
	circuit, err := n.session.Open(ctx, target, port)
	if err != nil {
		return nil, false, err
	}
	tc, err := n.creds.Client(ctx, circuit, target.ID, nil)
	if err != nil {
		circuit.Close()
		return nil, false, err
	}
	return tc, false, nil
}

// cause: only the causes common to all methods (a refusal, a hub's
// unreachable answer) are known.
func (routedMethod) cause(*Node, error) (End, error, bool) { return EndUnknown, nil, false }

func (routedMethod) explain(*MethodError, Facts, string) (string, bool) { return "", false }
