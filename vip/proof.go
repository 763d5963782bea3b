package vip

import (
	"net"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/chain"
)

// principal is who the far end of a connection proved to be: its
// certificate chain's subject, role and groups (vconn's Proof), or
// nothing beyond its identity in an open grid (nil chain).
type principal struct {
	chain *chain.Result
}

// String names the principal for logs: its chain's name and role, or
// that it proved none.
func (p principal) String() string {
	if p.chain == nil {
		return "no certificate (open grid)"
	}
	return p.chain.Name + " (" + string(p.chain.Role) + ")"
}

// proofOf reads the proof of conn's far end, when conn carries one.
func proofOf(conn net.Conn) principal {
	if c, ok := conn.(interface{ Proof() pki.Peer }); ok {
		return principal{chain: c.Proof().Chain}
	}
	return principal{}
}
