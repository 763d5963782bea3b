package vconn

import (
	"context"
	"fmt"
	"net"

	"github.com/gridlink/gridlink/identity"
)

// directMethod: the dialler reaches the target's direct listener at one of
// its addresses (or through a spare connection set up in advance,
// spare.go). It goes through no hub.
type directMethod struct{}

func (directMethod) rank() int      { return 0 }
func (directMethod) needsHub() bool { return false }

// headStarts: direct starts at once.
func (directMethod) headStarts() int { return 0 }

// setupTrips: connect, handshake (two and a half round trips).
func (directMethod) setupTrips() int { return 5 }

func (directMethod) possible(n *Node, target identity.Machine) error {
	if len(target.Addrs) == 0 {
		return methodErr(Direct, Remote, ErrNoAddress, fmt.Errorf("the target lists no addresses"))
	}
	return nil
}

// plausible: an address of the target is public or on one of our
// networks; without a default route here, only one on our networks.
func (directMethod) plausible(n *Node, target identity.Machine, r reach) bool {
	if r.nonRouted {
		return r.near(target.Addrs)
	}
	return r.reachable(target.Addrs)
}

func (directMethod) attempt(ctx context.Context, n *Node, target identity.Machine, port uint16, _ int) (net.Conn, bool, error) {
	return n.directSetup(ctx, target, port)
}

// cause: as this host measured its connections to the target's addresses;
// no route from here is this end's, anything else the target's.
func (directMethod) cause(_ *Node, err error) (End, error, bool) {
	cause := connectCause(err)
	if cause == ErrNoRoute {
		return Local, cause, true
	}
	return Remote, cause, true
}

func (directMethod) explain(me *MethodError, f Facts, s string) (string, bool) {
	return explainConnect(me.Cause, me.End, "this host", "the target", f.Target, f.LocalNets, s), true
}
