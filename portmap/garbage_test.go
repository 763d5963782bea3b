package portmap

import (
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A NAT-PMP gateway that answers garbage (random bytes, a truncated
// answer, the wrong opcode) gets a clear error within the time-out, never
// a hang or a mapping. Loopback only: the "gateway" is 127.0.0.1.
func TestNATPMPGarbage(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:5351")
	if err != nil {
		t.Fatalf("cannot bind the NAT-PMP port on loopback: %v", err)
	}
	defer pc.Close()
	answers := [][]byte{
		nil,                                    // random bytes
		{0, 128},                               // truncated
		{0, 200, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, // unknown opcode
	}
	for _, bad := range answers {
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64)
			for {
				_ = pc.SetReadDeadline(time.Now().Add(3 * time.Second))
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				b := bad
				if b == nil {
					b = make([]byte, 16)
					rand.Read(b)
				}
				pc.WriteTo(b, from)
			}
		}()
		start := time.Now()
		m, err := Map(context.Background(), Config{Protocols: []Protocol{NATPMP}, Gateway: netip.MustParseAddr("127.0.0.1"), Timeout: time.Second}, 40001)
		took := time.Since(start)
		if err == nil {
			m.Close()
			t.Fatalf("answer %x: a mapping from garbage", bad)
		}
		if !strings.Contains(err.Error(), "NAT-PMP") || took > 5*time.Second {
			t.Errorf("answer %x: %v after %v, want a NAT-PMP error within the time-out", bad, err, took)
		}
		<-done
	}
}

// A UPnP IGD whose description is garbage, or whose control answers are,
// gets a clear error naming it, quickly.
func TestUPnPGarbage(t *testing.T) {
	for name, body := range map[string]string{
		"garbage description": "<<<not xml at all",
		"no mapping service":  `<?xml version="1.0"?><root xmlns="urn:schemas-upnp-org:device-1-0"><device><friendlyName>toaster</friendlyName></device></root>`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(body))
		}))
		loc, _ := url.Parse(srv.URL + "/rootDesc.xml")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		_, err := igdAt(ctx, loc, netip.MustParseAddr("127.0.0.1"), "gridlink")
		cancel()
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "UPnP IGD") || time.Since(start) > 3*time.Second {
			t.Errorf("%s: %v after %v", name, err, time.Since(start))
		}
	}
}
