package wan

import (
	"net/netip"
	"slices"
)

// routeTable maps destination addresses to port indexes by longest-prefix
// match. It is built once and then only read, so lookups need no locking.
type routeTable struct {
	v4, v6 lpm
}

// lpm holds one address family: a map per prefix length, longest first.
type lpm struct {
	lens   []int                  // distinct prefix lengths, descending
	routes map[netip.Prefix]int32 // masked prefix -> port index
}

func newRouteTable(ports []Port) *routeTable {
	rt := &routeTable{
		v4: lpm{routes: map[netip.Prefix]int32{}},
		v6: lpm{routes: map[netip.Prefix]int32{}},
	}
	for i, p := range ports {
		for _, pfx := range p.Prefixes {
			if pfx.Addr().Is4() {
				rt.v4.add(pfx, int32(i))
			} else {
				rt.v6.add(pfx, int32(i))
			}
		}
	}
	return rt
}

func (t *lpm) add(pfx netip.Prefix, port int32) {
	pfx = pfx.Masked()
	t.routes[pfx] = port
	if !slices.Contains(t.lens, pfx.Bits()) {
		t.lens = append(t.lens, pfx.Bits())
		slices.Sort(t.lens)
		slices.Reverse(t.lens)
	}
}

func (t *lpm) lookup(a netip.Addr) int32 {
	for _, bits := range t.lens {
		pfx, _ := a.Prefix(bits)
		if port, ok := t.routes[pfx]; ok {
			return port
		}
	}
	return -1
}

// lookup returns the index of the port owning the destination address of
// the IP packet pkt, or -1 when no port owns it or pkt is not a well-formed
// IPv4 or IPv6 header.
func (rt *routeTable) lookup(pkt []byte) int32 {
	dst, ok := packetDst(pkt)
	if !ok {
		return -1
	}
	if dst.Is4() {
		return rt.v4.lookup(dst)
	}
	return rt.v6.lookup(dst)
}

// packetDst returns the destination address of the IP packet pkt.
func packetDst(pkt []byte) (netip.Addr, bool) {
	if len(pkt) < 1 {
		return netip.Addr{}, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 || pkt[0]&0x0f < 5 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(pkt[16:20])), true
	case 6:
		if len(pkt) < 40 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16([16]byte(pkt[24:40])), true
	}
	return netip.Addr{}, false
}
