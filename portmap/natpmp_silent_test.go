package portmap

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A NAT-PMP gateway that never answers is said to give no answer within
// the timeout: the library says so only in words, so the client tells it
// by the call's duration (errNoAnswer), not by the library's text.
func TestNATPMPSilentGateway(t *testing.T) {
	gw := netip.MustParseAddr("127.77.0.1") // loopback, all of 127/8 is local
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(gw, natpmpPort)))
	if err != nil {
		t.Skipf("cannot listen as the silent gateway: %v", err)
	}
	defer c.Close() // reads nothing, answers nothing
	timeout := 300 * time.Millisecond
	_, err = discoverNATPMP(context.Background(), Config{Gateway: gw, Timeout: timeout})
	if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("a silent gateway: %v; want errNoAnswer, \"no answer within 300ms\"", err)
	}
}
