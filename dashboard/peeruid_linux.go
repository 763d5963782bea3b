package dashboard

import (
	"bufio"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// peerUID finds whose socket is the other end of c, a TCP connection over
// loopback accepted here: the kernel's socket table (/proc/net/tcp,
// /proc/net/tcp6, of this network namespace) lists the peer's socket,
// with c's ends swapped, and its owner's uid. ok is false when the table
// does not list it.
func peerUID(c net.Conn) (uid int, ok bool) {
	la, lok := c.LocalAddr().(*net.TCPAddr)
	ra, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, false
	}
	local, remote := la.AddrPort(), ra.AddrPort()
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := findUID(table, remote, local); ok {
			return uid, true
		}
	}
	return 0, false
}

// findUID reads a socket table for the socket from local to remote and
// returns its owner's uid.
func findUID(table string, local, remote netip.AddrPort) (int, bool) {
	f, err := os.Open(table)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		uid, l, r, ok := parseSocketLine(sc.Text())
		if ok && sameEnd(l, local) && sameEnd(r, remote) {
			return uid, true
		}
	}
	return 0, false
}

// sameEnd compares two ends, an IPv4 address and its IPv4-mapped IPv6
// form alike.
func sameEnd(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseSocketLine reads a line of /proc/net/tcp{,6}:
//
//	sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
//
// where an address is the IP in hex, 32-bit words in host (little-endian)
// order, a colon and the port in hex.
func parseSocketLine(line string) (uid int, local, remote netip.AddrPort, ok bool) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return 0, local, remote, false
	}
	var lok, rok bool
	local, lok = parseSocketAddr(f[1])
	remote, rok = parseSocketAddr(f[2])
	u, err := strconv.Atoi(f[7])
	if !lok || !rok || err != nil {
		return 0, local, remote, false
	}
	return u, local, remote, true
}

func parseSocketAddr(s string) (netip.AddrPort, bool) {
	ip, port, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	b, err := hex.DecodeString(ip)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(b); i += 4 { // each word from host order
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(p)), true
}
