package direct

import "net"

// Link types (ARPHRD_*, linux/if_arp.h) of devices that are tunnels or
// point-to-point links rather than networks: their addresses are never
// advertised for direct connections (LocalPrefixes).
const (
	arphrdPPP     = 512   // PPP
	arphrdTunnel  = 768   // IPIP
	arphrdTunnel6 = 769   // IP6IP6
	arphrdSIT     = 776   // IPv6 in IPv4
	arphrdIPGRE   = 778   // GRE
	arphrdIP6GRE  = 823   // GRE over IPv6
	arphrdNone    = 65534 // no hardware header: TUN devices, WireGuard
)

// tunnelDevice reports whether an interface with these flags and this
// link type (0: unknown) is a point-to-point or tunnel device: TUN
// devices (a VPN's, wireguard-go's, Nebula's, the node's own virtual
// network device), WireGuard, PPP, IP-in-IP and GRE tunnels.
func tunnelDevice(flags net.Flags, linkType uint16) bool {
	if flags&net.FlagPointToPoint != 0 {
		return true
	}
	switch linkType {
	case arphrdPPP, arphrdTunnel, arphrdTunnel6, arphrdSIT, arphrdIPGRE, arphrdIP6GRE, arphrdNone:
		return true
	}
	return false
}
