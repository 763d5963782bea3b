package portmap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// ErrNoDefaultRoute is returned by DefaultGateway when no default route
// goes through a gateway.
var ErrNoDefaultRoute = errors.New("no default route through a gateway")

// parseRoutes returns the gateway of the IPv4 default route with the
// lowest metric in a route table in the text form of /proc/net/route: a
// header line, then one line a route of tab-separated fields Iface,
// Destination, Gateway, Flags, RefCnt, Use, Metric, Mask, ...; addresses
// are 32-bit hex numbers in host byte order, flags hex (0x1 up, 0x2 via a
// gateway).
func parseRoutes(r io.Reader) (netip.Addr, error) {
	var best netip.Addr
	bestMetric := uint64(1 << 63)
	sc := bufio.NewScanner(r)
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(f[1], 16, 32)
		gw, err2 := strconv.ParseUint(f[2], 16, 32)
		flags, err3 := strconv.ParseUint(f[3], 16, 32)
		metric, err4 := strconv.ParseUint(f[6], 10, 63)
		mask, err5 := strconv.ParseUint(f[7], 16, 32)
		if errors.Join(err1, err2, err3, err4, err5) != nil || dst != 0 || mask != 0 || flags&0x3 != 0x3 || gw == 0 {
			continue
		}
		if metric < bestMetric {
			var b [4]byte
			binary.NativeEndian.PutUint32(b[:], uint32(gw))
			best, bestMetric = netip.AddrFrom4(b), metric
		}
	}
	if err := sc.Err(); err != nil {
		return netip.Addr{}, err
	}
	if !best.IsValid() {
		return netip.Addr{}, ErrNoDefaultRoute
	}
	return best, nil
}
