package agent

import (
	"context"
	"testing"
	"time"

	"github.com/gridlink/gridlink/status"
)

// What a service above the agent adds to its status (SetStatus) reaches
// the control API's clients, and is gone once removed.
func TestSetStatus(t *testing.T) {
	a, c := startAgent(t, "hooked", "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil || st.VIP != nil {
		t.Fatalf("status before: vip %+v, %v", st.VIP, err)
	}
	a.SetStatus(func(st *status.Agent) {
		st.VIP = &status.VIP{Device: "gridlink0", Addrs: []string{"100.97.3.4/12"}, Peers: []status.VIPPeer{{Name: "peer", Path: "direct", SentPackets: 3}}}
	})
	st, err = c.Status(ctx)
	if err != nil || st.VIP == nil || st.VIP.Device != "gridlink0" || len(st.VIP.Peers) != 1 || st.VIP.Peers[0].Path != "direct" || st.VIP.Peers[0].SentPackets != 3 || st.Node.Name != "hooked" {
		t.Fatalf("status with the hook: %+v, %v", st, err)
	}
	a.SetStatus(nil)
	if st, err = c.Status(ctx); err != nil || st.VIP != nil {
		t.Fatalf("status after: vip %+v, %v", st.VIP, err)
	}
}
