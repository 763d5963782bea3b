package vconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
)

// spliceMethod: both ends connect to each other at once through their NATs
// (a TCP simultaneous open), arranged through the hubs (splice.go).
type spliceMethod struct{}

func (spliceMethod) rank() int      { return 2 }
func (spliceMethod) needsHub() bool { return true }

// headStarts: splicing starts at once: its rendezvous through the hubs
// takes longer than a direct setup, which still wins if it works.
func (spliceMethod) headStarts() int { return 0 }

// setupTrips: rendezvous (one and a half round trips), connect, handshake.
func (spliceMethod) setupTrips() int { return 7 }

// fastestTrips: answered early (nat.Reply.Early), the rendezvous takes a
// round trip: three in all. The race reads the path's round trip from a
// splice that won by this count, so as not to take it for shorter than it
// is (and cut short the wait for a more direct method).
func (spliceMethod) fastestTrips() int { return 6 }

// possible: not toward a site where splicing failed recently, nor from
// behind a NAT whose ports cannot be predicted.
func (spliceMethod) possible(n *Node, target identity.Machine) error {
	n.self.mu.Lock()
	st := n.self.nat
	n.self.mu.Unlock()
	if failed, waiting := n.noSplice.Waiting(target.Hub, time.Now()); waiting {
		return methodErr(Splice, Path, ErrSpliceRecent, fmt.Errorf("splicing to site %s failed %v ago", target.HubName, time.Since(failed).Round(time.Second)))
	}
	if !st.at.IsZero() && st.err == nil && !st.class.Predictable() {
		cause := ErrNATUnknown
		if st.class.Allocation == nat.Random {
			cause = ErrRandomNAT
		}
		return methodErr(Splice, Local, cause, fmt.Errorf("this host's NAT is %s: its ports cannot be predicted", st.class))
	}
	return nil
}

// plausible: both ends' SYNs must cross, so an end without a default
// route makes it a long shot unless the target is on our networks.
func (spliceMethod) plausible(_ *Node, target identity.Machine, r reach) bool {
	if r.nonRouted || target.NonRouted {
		return r.near(target.Addrs)
	}
	return true
}

// attempt: through a spliced spare kept for the target if there is one
// (spare.go), else splicing in up to tries attempts.
func (spliceMethod) attempt(ctx context.Context, n *Node, target identity.Machine, port uint16, tries int) (net.Conn, bool, error) {
	return n.spareSetup(ctx, target, port, Splice, func(ctx context.Context) (net.Conn, error) {
		return n.splice(ctx, target, port, tries)
	})
}

func (spliceMethod) cause(n *Node, err error) (End, error, bool) {
	switch {
	case errors.Is(err, nat.ErrPredict):
		return Local, n.natCause(), true
	case errors.Is(err, errPunch):
		return Path, ErrPunch, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNoSpliceAnswer):
		return Remote, ErrTimeout, true
	}
	return EndUnknown, nil, false
}

func (spliceMethod) explain(me *MethodError, _ Facts, s string) (string, bool) {
	if me.Cause == ErrTimeout {
		return "the target did not answer the splice offer (" + s + ")", true
	}
	return "", false
}
