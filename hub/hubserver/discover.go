package hubserver

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/identity"
)

// Hub discovery by UDP multicast: a node that knows no hub asks its site's
// networks, and every hub listening there answers by unicast.
//
// Wire format, one UDP datagram each, ASCII, fields separated by spaces:
//
//	query:  "GRIDLINK-DISCOVER 1"
//	answer: "GRIDLINK-HUB 1 NAME ID PORT"
//
// NAME is the hub's name, ID its full ID, PORT the TCP port it listens on
// for attachments; the node dials the answer's source address at PORT.
// Queries go to DiscoveryGroup with TTL 1: they never leave the site's
// networks.
const (
	discoverQuery  = "GRIDLINK-DISCOVER 1"
	discoverAnswer = "GRIDLINK-HUB 1"
	maxDatagram    = 512
)

// DiscoveryGroup is the multicast group and port hubs answer on
// (organization-local scope, RFC 2365).
var DiscoveryGroup = netip.MustParseAddrPort("239.192.74.1:7947")

// Found is a hub that answered a discovery query.
type Found struct {
	Name string
	ID   identity.ID
	Addr netip.AddrPort // where to attach: the answer's source address and the hub's port
}

func encodeAnswer(name string, id identity.ID, port uint16) []byte {
	return []byte(fmt.Sprintf("%s %s %s %d", discoverAnswer, name, id, port))
}

// parseAnswer decodes an answer datagram that came from src.
func parseAnswer(b []byte, src netip.Addr) (Found, error) {
	if len(b) > maxDatagram {
		return Found{}, fmt.Errorf("hub discovery: answer of %d bytes", len(b))
	}
	f := strings.Fields(string(b))
	if len(f) != 5 || f[0]+" "+f[1] != discoverAnswer {
		return Found{}, fmt.Errorf("hub discovery: not an answer: %q", clipText(b))
	}
	if len(f[2]) > 64 {
		return Found{}, fmt.Errorf("hub discovery: hub name too long")
	}
	id, err := identity.ParseID(f[3])
	if err != nil {
		return Found{}, fmt.Errorf("hub discovery: %w", err)
	}
	port, err := strconv.ParseUint(f[4], 10, 16)
	if err != nil || port == 0 {
		return Found{}, fmt.Errorf("hub discovery: bad port %q", f[4])
	}
	return Found{Name: f[2], ID: id, Addr: netip.AddrPortFrom(src, uint16(port))}, nil
}

func clipText(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
