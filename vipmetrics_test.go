package gridlink

import (
	"testing"

	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vip"
)

// What /metrics reads of the packet path (metrics.Node.VirtualCounters):
// its peers' traffic summed, the peers with a connection to send on, its
// drops by reason.
func TestVIPCounters(t *testing.T) {
	got := vipCounters(vip.Stats{
		Drops: vip.Drops{SpoofedSource: 2, QueueFull: 3, Denied: 1},
		Peers: []vip.PeerStats{
			{Connected: true, SentPackets: 10, SentBytes: 1000, RecvPackets: 4, RecvBytes: 400},
			{SentPackets: 1, SentBytes: 50, RecvPackets: 2, RecvBytes: 60},
		},
	})
	want := status.VIPCounters{SentPackets: 11, SentBytes: 1050, RecvPackets: 6, RecvBytes: 460, Connected: 1,
		Drops: status.VIPDrops{SpoofedPackets: 2, QueueFullPackets: 3, DeniedPackets: 1}}
	if got != want {
		t.Errorf("vipCounters = %+v, want %+v", got, want)
	}
}
