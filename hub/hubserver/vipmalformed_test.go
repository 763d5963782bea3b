package hubserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// Malformed claims of virtual addresses close the sender's link, the hub
// logs why, and it goes on serving the others' claims and lookups.
func TestVirtualMalformedClaims(t *testing.T) {
	h, logs := loggedHub(t)
	addr := h.Addr().String()
	good1 := attachNode(t, "good1", addr)
	good2 := attachNode(t, "good2", addr)
	ctx := context.Background()
	if err := good1.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatal(err)
	}
	ctl := func(s string) []byte { return wire.Append(nil, wire.TControl, 0, []byte(s)) }
	cases := []struct{ name, msg, log string }{
		{"v6 as v4", `{"kind":"virtual","virtual":{"query":1,"v4":"fd67:726c::9"}}`, "is not an IPv4 address"},
		{"v4 as v6", `{"kind":"virtual","virtual":{"query":1,"v6":"100.96.0.9"}}`, "is not an IPv6 address"},
		{"mapped v6", `{"kind":"virtual","virtual":{"query":1,"v6":"::ffff:100.96.0.9"}}`, "is not an IPv6 address"},
		{"multicast", `{"kind":"virtual","virtual":{"query":1,"v4":"224.0.0.1"}}`, "cannot be a virtual address"},
		{"broadcast", `{"kind":"virtual","virtual":{"query":1,"v4":"255.255.255.255"}}`, "cannot be a virtual address"},
		{"loopback", `{"kind":"virtual","virtual":{"query":1,"v6":"::1"}}`, "cannot be a virtual address"},
		{"zone", `{"kind":"virtual","virtual":{"query":1,"v6":"fd67:726c::9%eth0"}}`, "has a zone"},
		{"not an address", `{"kind":"virtual","virtual":{"query":1,"v4":"banana"}}`, "control message"},
		{"unknown field", `{"kind":"virtual","virtual":{"query":1,"v4":"100.96.0.9","v5":"x"}}`, "unknown field"},
		{"no body", `{"kind":"virtual","lookup_addr":{"query":1,"addr":"100.96.0.9"}}`, "malformed body"},
		{"lookup of no address", `{"kind":"lookup-addr","lookup_addr":{"query":1}}`, "no address"},
		{"routed claim", fmt.Sprintf(`{"kind":"routed","routed":{"from_hub":"%s","to_hub":"%s","ttl":1,"msg":{"kind":"virtual","virtual":{"query":1,"v4":"100.96.0.9"}}}}`, h.ID(), h.ID()), "cannot route a virtual message"},
		{"a hub's claim on the link", fmt.Sprintf(`{"kind":"addr-claim","addr_claim":{"query":1,"addr":"100.96.0.5","holding":{"node":{"id":"%s"},"owner":"x","since_ms":1}}}`, h.ID()), "unexpected addr-claim message from a node"},
		{"an ack from a node", `{"kind":"virtual-ack","virtual_ack":{"query":1}}`, "unexpected virtual-ack message from a node"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("badvip%d", i)
			c := dialRaw(t, addr, name)
			if _, err := c.Write(c.seal(t, ctl(tc.msg))); err != nil {
				t.Fatal(err)
			}
			closedByHub(t, c)
			testwait.Until(t, "the hub to log why it closed "+name, 5*time.Second, func() bool { return logs.has("node "+name+" (", tc.log) })
			// the hub goes on keeping addresses for everyone else.
			if m, err := good2.LookupAddr(ctx, v4a); err != nil || m.ID != good1.Machine().ID {
				t.Fatalf("lookup after %s: %v %v", tc.name, m, err)
			}
		})
	}
	if err := good2.ClaimAddrs(ctx, v4b, v6b); err != nil {
		t.Fatalf("a good claim after the abuse: %v", err)
	}
}
