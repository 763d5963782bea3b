package hubserver

import (
	"context"
	"fmt"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// Revocation lists between hubs (wire.KCRL): a hub sends the lists it
// holds to a hub when their link comes up, and to every hub it is linked
// to when it takes a newer one (from its file, or from another hub); a
// hub that receives a newer list signed by its CA takes it at once, so a
// member revoked at one hub is refused at every hub within a link's round
// trip, not at each hub's next reading of its file (every 10 s), even
// where hubs share no file system. Lists travel as the CA signed them:
// the receiver checks the signature and the number (pki.Trust.Offer).

// sendCRLs sends p, a neighbour hub, every revocation list this hub holds.
func (h *Hub) sendCRLs(p *peer) {
	t := h.cfg.Creds.Trust()
	if t == nil {
		return // an open grid
	}
	for _, crl := range t.CRLs() {
		if len(crl.Raw) > wire.MaxCRL {
			h.logf("hub %s: revocation list number %v is too large to send to %s (%d bytes, at most %d)", h.cfg.Name, crl.Number, p.t.Desc(), len(crl.Raw), wire.MaxCRL)
			continue
		}
		p.t.SendControl(&wire.Message{Kind: wire.KCRL, CRL: &wire.CRL{DER: crl.Raw}})
	}
}

// broadcastCRLs sends this hub's revocation lists to every neighbour hub:
// it has just taken a newer one.
func (h *Hub) broadcastCRLs() {
	for _, p := range h.neighbours() {
		h.sendCRLs(p)
	}
}

// neighbours is a snapshot of the hubs linked to this one.
func (h *Hub) neighbours() []*peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := make([]*peer, 0, len(h.hubs))
	for _, p := range h.hubs {
		ps = append(ps, p)
	}
	return ps
}

// takeCRL handles a revocation list from neighbour hub p: taken if newer
// (then Trust's change passes it on to the other hubs and closes the
// links it revokes: watchRevocations), answered with ours if older.
func (h *Hub) takeCRL(p *peer, m *wire.CRL) {
	t := h.cfg.Creds.Trust()
	if t == nil {
		return
	}
	o, err := t.Offer(m.DER)
	switch {
	case err != nil:
		h.logf("hub %s: revocation list from %s not taken: %v", h.cfg.Name, p.t.Desc(), err)
	case o == pki.Newer:
		h.logf("hub %s: took a newer revocation list from %s", h.cfg.Name, p.t.Desc())
	case o == pki.Older:
		h.sendCRLs(p)
	}
}

// watchRevocations closes the links of hubs and nodes that a new
// revocation list revokes: a revoked member is cut off at once, not only
// refused when it next connects. Its circuits go with its link. It also
// passes the new list on to the neighbour hubs (crl.go).
func (h *Hub) watchRevocations(ctx context.Context) {
	t := h.cfg.Creds.Trust()
	if t == nil {
		return // an open grid
	}
	t.OnChange(ctx.Done(), func() {
		h.broadcastCRLs()
		h.mu.Lock()
		peers := make([]*peer, 0, len(h.all))
		for p := range h.all {
			peers = append(peers, p)
		}
		h.mu.Unlock()
		for _, p := range peers {
			if err := t.Recheck(p.who); err != nil {
				h.logf("hub %s: closing the link of %s, no longer admitted: %v", h.cfg.Name, p.who, err)
				p.t.Close(fmt.Errorf("%s is no longer admitted: %w", p.who, err))
			}
		}
	})
}
