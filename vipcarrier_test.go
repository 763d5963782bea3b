package gridlink

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/tun"
	"github.com/gridlink/gridlink/tun/tuntest"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/vip"
)

// mapResolver finds virtual addresses in a map.
type mapResolver map[netip.Addr]identity.ID

func (m mapResolver) Resolve(ctx context.Context, a netip.Addr) (identity.ID, error) {
	if id, ok := m[a]; ok {
		return id, nil
	}
	return identity.ID{}, vip.ErrNoNode
}

// carrierNode is a node's packet path on an in-memory device, served on
// vip.Port and vip.CarrierPort through vconn as the agent serves it.
type carrierNode struct {
	v   *vipNode
	app *tuntest.Device
	in  chan []byte
}

func startCarrierNode(t *testing.T, n *vconn.Node, dir mapResolver, carriers int) *carrierNode {
	t.Helper()
	v4, v6, err := vip.Addrs(vip.DefaultPrefix4, vip.DefaultPrefix6, n.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	dir[v4], dir[v6] = n.ID(), n.ID()
	app, dev := tuntest.Pair(1500)
	v := &vipNode{cfg: VIPConfig{Carriers: carriers}.withDefaults(), node: n, peers: newVIPPeers(), v4: v4, v6: v6}
	if v.net, err = vip.New(vip.Config{Device: dev, ID: n.ID(), Addrs: []netip.Addr{v4, v6}, Resolver: dir,
		Dialer: &vipDialer{node: n, peers: v.peers}, Carriers: carriers}); err != nil {
		t.Fatal(err)
	}
	if err := v.listen(); err != nil {
		t.Fatal(err)
	}
	cn := &carrierNode{v: v, app: app, in: make(chan []byte, 1024)}
	go func() {
		bufs, sizes := [][]byte{make([]byte, tun.Offset+1500)}, []int{0}
		for {
			if _, err := app.Read(bufs, sizes, tun.Offset); err != nil {
				close(cn.in)
				return
			}
			cn.in <- bytes.Clone(bufs[0][tun.Offset : tun.Offset+sizes[0]])
		}
	}()
	t.Cleanup(func() { v.close(); app.Close() })
	return cn
}

// udpFlow is packet seq of flow f from src to dst: an IPv4 UDP packet
// from port 2000+f, its payload the sequence number.
func udpFlow(src, dst netip.Addr, f, seq int) []byte {
	p := make([]byte, 20+8+4)
	p[0], p[8], p[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(p[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:], uint16(2000+f))
	binary.BigEndian.PutUint16(p[22:], 9)
	binary.BigEndian.PutUint16(p[24:], 12)
	binary.BigEndian.PutUint32(p[28:], uint32(seq))
	return p
}

// Over real vconn connections (TLS, direct on loopback): packets of 8
// flows from a to b open carriers on vip.CarrierPort by the main
// connection's method, as many as both agree on (a 8, b 3: 2 carriers),
// and every flow's packets arrive whole and in order.
func TestVIPCarriersOverVconn(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	dir := mapResolver{}
	na, nb := vipTestNode(t, h, "a"), vipTestNode(t, h, "b")
	a, b := startCarrierNode(t, na, dir, 8), startCarrierNode(t, nb, dir, 3)
	const flows = 8
	next := make([]int, flows)
	seq := 0
	round := func() {
		var batch [][]byte
		for f := range flows {
			batch = append(batch, append(make([]byte, tun.Offset), udpFlow(a.v.v4, b.v.v4, f, seq)...))
		}
		seq++
		if _, err := a.app.Write(batch, tun.Offset); err != nil {
			t.Fatal(err)
		}
		for range flows {
			var p []byte
			select {
			case p = <-b.in:
			case <-time.After(testwait.Default):
				t.Fatalf("packet %d lost", seq-1)
			}
			f, s := int(binary.BigEndian.Uint16(p[20:]))-2000, int(binary.BigEndian.Uint32(p[28:]))
			if f < 0 || f >= flows || s != next[f] {
				t.Fatalf("flow %d: packet %d, want %d", f, s, next[f])
			}
			next[f]++
		}
	}
	testwait.Until(t, "2 carriers from a to b", 20*time.Second, func() bool {
		for range 5 {
			round()
		}
		return a.v.net.Stats().Peer(nb.ID()).Carriers == 2
	})
	for range 200 {
		round()
	}
	t.Log("rounds done")
	st := a.v.net.Stats().Peer(nb.ID())
	if st.Method != string(vconn.Direct) || st.Carriers != 2 || st.Conns != 3 || st.Switches != 0 {
		t.Errorf("a's peer b: %+v, want direct with 2 carriers", st)
	}
	b.v.peers.mu.Lock()
	paths := b.v.peers.pathsLocked(na.ID())
	b.v.peers.mu.Unlock()
	if fmt.Sprint(paths) != "[direct direct direct]" {
		t.Errorf("b's connections from a: %v, want three direct", paths)
	}
}
