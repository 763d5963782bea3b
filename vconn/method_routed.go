package vconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// routedMethod: a circuit through the hubs relays the data hub to hub; it
// works whenever both ends are attached and the hubs have a route, so it
// stands by for the others. The target's side is serveCircuits, below.
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

// serveCircuits handles circuits opened toward this node (routed setup).
func (n *Node) serveCircuits() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case in, ok := <-n.session.Incoming():
			if !ok {
				return
			}
			if n.listener(in.Open.Port) == nil {
				in.Refuse(n.refusal(in.Open.Port))
				continue
			}
			if err := in.Accept(); err != nil {
				continue
			}
			go func() {
				ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
				defer cancel()
				tc, err := n.creds.Server(ctx, in.Circuit, func(p pki.Peer) error {
					if p.ID != in.Open.From.ID {
						return fmt.Errorf("circuit opened by %s but handshake by %s", in.Open.From.ID.Short(), p.ID.Short())
					}
					return n.access(in.Open.Port, p)
				})
				if err != nil {
					n.cfg.Logf("vconn: routed connection from %s to port %d: %v", in.Open.From, in.Open.Port, err)
					if !errors.Is(err, pki.ErrDenied) { // a refusal closes once its reason is out
						in.Circuit.Close()
					}
					return
				}
				n.deliver(tc, Routed, in.Open.From, in.Open.Port)
			}()
		}
	}
}
