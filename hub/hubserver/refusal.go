package hubserver

import (
	"fmt"
	"net"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/wire"
)

// A hub refuses a link after reading its hello (the wire format and the
// refused end's error: package hub's refusal.go) when the certificate's role does
// not allow what the hello asks, the name is not a name (nameRefusal),
// or is not the certificate's or is held by another identity (names.go).

// admitRole checks that what a peer's hello says it is (a hub linking, a
// node attaching) matches its certificate: only hubs link, and hubs do not
// attach as nodes. In an open grid (no chain) anyone may be either.
func admitRole(p pki.Peer, hello string) error {
	if p.Chain == nil {
		return nil
	}
	switch {
	case hello == "hub" && p.Chain.Role != ca.Hub:
		return fmt.Errorf("%s has a %s certificate but asked to link as a hub", p, p.Chain.Role)
	case hello != "hub" && p.Chain.Role == ca.Hub:
		return fmt.Errorf("%s has a hub certificate but asked to attach as a node", p)
	}
	return nil
}

// refuse sends a link whose hello was read the refusal in place of the
// hub's hello, logs it and closes the link. The refused end has nothing
// more to send before it reads our answer, so closing does not reset
// the connection under the refusal.
func (h *Hub) refuse(c net.Conn, s *wire.Sealer, who string, e *hub.RefusedError) {
	h.counts.refuse(linkRefusal(e.Code))
	h.logf("hub %s: connection from %s (%s): %v", h.cfg.Name, c.RemoteAddr(), who, e)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write(s.Append(nil, wire.TControl, 0, 0, wire.Encode(e.Message())))
	c.Close()
}

// nameRefusal refuses a hello whose name is not a name
// (identity.CheckName), for every role: a hub's name must be one, a
// node's may be empty (it then goes by its ID).
func nameRefusal(hello *wire.Hello) *hub.RefusedError {
	name := hello.Machine.Name
	if name == "" && hello.Role == "node" {
		return nil
	}
	if err := identity.CheckName(name); err != nil {
		return &hub.RefusedError{Code: wire.RefusedBadName, Reason: fmt.Sprintf("%s %s: %v", hello.Role, hello.Machine.ID.Short(), err)}
	}
	return nil
}

// roleRefusal is admitRole's refusal as a *hub.RefusedError.
func roleRefusal(err error) *hub.RefusedError {
	return &hub.RefusedError{Code: wire.RefusedRole, Reason: err.Error()}
}
