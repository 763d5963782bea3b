package portmap

import (
	"fmt"
	"net/netip"
	"os"
)

// DefaultGateway returns the gateway of the IPv4 default route, read from
// the calling thread's network namespace (/proc/thread-self/net/route:
// /proc/net/route would be the process's main thread's).
func DefaultGateway() (netip.Addr, error) {
	f, err := os.Open("/proc/thread-self/net/route")
	if os.IsNotExist(err) { // kernels before 3.17
		f, err = os.Open("/proc/self/net/route")
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("read routes: %w", err)
	}
	defer f.Close()
	return parseRoutes(f)
}
