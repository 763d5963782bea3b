package dns

import (
	"net/netip"
	"strconv"
	"strings"
)

// reverseAddr is the address a reverse name (lower case, with its final
// dot) stands for: d.c.b.a.in-addr.arpa. for IPv4, 32 nibbles then
// ip6.arpa. for IPv6 (RFC 1035 3.5, RFC 3596 2.5).
func reverseAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, l := range labels {
			if l == "" || len(l) > 3 || (len(l) > 1 && l[0] == '0') {
				return netip.Addr{}, false
			}
			n, err := strconv.ParseUint(l, 10, 8)
			if err != nil {
				return netip.Addr{}, false
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa."); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, l := range labels {
			if len(l) != 1 {
				return netip.Addr{}, false
			}
			n, err := strconv.ParseUint(l, 16, 8)
			if err != nil {
				return netip.Addr{}, false
			}
			j := 31 - i // nibble index from the most significant
			if j%2 == 0 {
				b[j/2] |= byte(n) << 4
			} else {
				b[j/2] |= byte(n)
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// ReverseName is the reverse name of a (as reverseAddr reads it).
func ReverseName(a netip.Addr) string {
	a = a.Unmap()
	var sb strings.Builder
	if a.Is4() {
		b := a.As4()
		for i := 3; i >= 0; i-- {
			sb.WriteString(strconv.Itoa(int(b[i])))
			sb.WriteByte('.')
		}
		sb.WriteString("in-addr.arpa.")
		return sb.String()
	}
	b := a.As16()
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		sb.WriteByte(hex[b[i]&0xf])
		sb.WriteByte('.')
		sb.WriteByte(hex[b[i]>>4])
		sb.WriteByte('.')
	}
	sb.WriteString("ip6.arpa.")
	return sb.String()
}
