package lab_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// vipNode is a `gridlink node --vip` running in a lab host: its process
// and its virtual addresses, as it printed them.
type vipNode struct {
	name   string
	h      *topology.Host
	p      *proc
	v4, v6 netip.Addr
}

var vipStartLine = regexp.MustCompile(`virtual network on gridlink0: \[(\S+)/\d+ (\S+)/\d+\]`)

// startVIPNode runs node name with --vip in h, attached to the hub at
// hubAddr, with args (its certificate flags) and waits for its
// addresses.
func startVIPNode(t *testing.T, bin string, h *topology.Host, name, hubAddr string, args ...string) *vipNode {
	t.Helper()
	p := startIn(t, h, name, append([]string{bin, "node", "--name", name, "--verbose", "--hub", hubAddr, "--vip"}, args...)...)
	p.waitLog(t, "virtual network on gridlink0", 30*time.Second)
	m := vipStartLine.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("%s printed no virtual addresses:\n%s", name, p.output())
	}
	return &vipNode{name: name, h: h, p: p, v4: netip.MustParseAddr(m[1]), v6: netip.MustParseAddr(m[2])}
}

// vipPing pings to's address a from from (3 replies within 30 s: the
// first packets wait for the lookup and the connection).
func vipPing(ctx context.Context, from *vipNode, a netip.Addr) error {
	_, errb, err := tryIn(ctx, from.h, nil, "ping", "-n", "-c", "3", "-i", "0.3", "-w", "30", a.String())
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v %s", a, from.name, err, errb)
	}
	return nil
}

// vipTCP sends 1 MiB from from to an echo listener on to's address a
// and checks it comes back whole.
func vipTCP(t *testing.T, from, to *vipNode, a netip.Addr) {
	t.Helper()
	addr := netip.AddrPortFrom(a, 7000).String()
	var ln net.Listener
	if err := netns.Do(lab.HostNS(to.h), func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen on %s %s: %v", to.name, addr, err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var c net.Conn
	if err := netns.Do(lab.HostNS(from.h), func() (err error) { c, err = net.DialTimeout("tcp", addr, 20*time.Second); return err }); err != nil {
		t.Fatalf("%s: dial %s (%s): %v", from.name, addr, to.name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	data := bytes.Repeat([]byte("gridlink virtual network "), 1<<20/25)
	go func() { c.Write(data); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("%s -> %s (%s): %d of %d bytes came back, %v", from.name, to.name, addr, len(got), len(data), err)
	}
}

// vipStatus is n's virtual network as `gridlink status --json` shows it.
func vipStatus(t *testing.T, ctx context.Context, bin string, n *vipNode) *status.VIP {
	t.Helper()
	out := runIn(t, ctx, n.h, nil, bin, "status", "--json")
	var st status.Agent
	if err := json.Unmarshal(out, &st); err != nil || st.VIP == nil {
		t.Fatalf("status --json of %s: %v\n%s", n.name, err, out)
	}
	return st.VIP
}

// vipPeerOf is the peer named name in st.
func vipPeerOf(st *status.VIP, name string) (status.VIPPeer, bool) {
	i := slices.IndexFunc(st.Peers, func(p status.VIPPeer) bool { return p.Name == name })
	if i < 0 {
		return status.VIPPeer{}, false
	}
	return st.Peers[i], true
}

// The virtual network on nat-hubs (issue 19), every node started with
// `gridlink node --vip` and certified by the lab CA: east-n and west-n,
// behind NATs, reach each other only routed through their hubs; east-n
// and pub-n connect directly (east-n dials the public pub-n, pub-n is
// called back). Between both pairs, both ways, over IPv4 and IPv6: ping
// and a TCP flow by virtual address; `gridlink status --json` shows each
// peer with its addresses, its path and its traffic. Non-members: a node
// without a certificate is refused at attach (its error and the hub's log
// name why) and makes no device; a node of another CA, attached through a
// hub that lets anyone attach (as a compromised hub would), gets no
// packet through: pub-n refuses its connection end to end, and both name
// the reason.
func TestNATHubsVIP(t *testing.T) {
	bin := gridlinkBin(t)
	tbin := testingBin(t)
	L := &natHubs{t: t, bin: bin, hubs: map[string]*proc{}}
	L.topo = labtest.Up(t, "nat-hubs", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outsider := labOutsiders(t)[0] // a certificate from another CA
	hub1, hub2 := L.host("pub-hub1"), L.host("pub-hub2")
	eastHub, westHub := L.host("east-hub"), L.host("west-hub")
	L.startHub(hub1, "pub1", L.issue(ca.Hub, "pub1"))
	L.startHub(eastHub, "east", L.issue(ca.Hub, "east"), hub1)
	L.startHub(westHub, "west", L.issue(ca.Hub, "west"), hub1)
	testwait.Until(t, "east's and west's hubs to route to each other", 30*time.Second, func() bool {
		return L.reachable(eastHub, "west", [32]byte{}) && L.reachable(westHub, "east", [32]byte{})
	})
	pub := startVIPNode(t, bin, L.host("pub-n"), "pub-n", hubAddr(hub1), L.issue(ca.Node, "pub-n").Args()...)
	east := startVIPNode(t, bin, L.host("east-n"), "east-n", hubAddr(eastHub), L.issue(ca.Node, "east-n").Args()...)
	west := startVIPNode(t, bin, L.host("west-n"), "west-n", hubAddr(westHub), L.issue(ca.Node, "west-n").Args()...)
	for _, n := range []*vipNode{pub, east, west} {
		if !n.v4.IsValid() || !netip.MustParsePrefix("100.96.0.0/12").Contains(n.v4) || !netip.MustParsePrefix("fd67:726c::/32").Contains(n.v6) {
			t.Fatalf("%s: addresses %s %s outside the default prefixes", n.name, n.v4, n.v6)
		}
	}

	pairs := []struct {
		a, b  *vipNode
		paths []string // the paths the pair may use
	}{
		{east, west, []string{"routed"}},
		{east, pub, []string{"direct", "reverse"}},
	}
	for _, pr := range pairs {
		for _, d := range [][2]*vipNode{{pr.a, pr.b}, {pr.b, pr.a}} {
			from, to := d[0], d[1]
			t.Run(from.name+"_to_"+to.name, func(t *testing.T) {
				for _, a := range []netip.Addr{to.v4, to.v6} {
					if err := vipPing(ctx, from, a); err != nil {
						t.Fatal(err)
					}
					vipTCP(t, from, to, a)
				}
			})
		}
	}
	t.Run("Status", func(t *testing.T) {
		for _, pr := range pairs {
			for _, d := range [][2]*vipNode{{pr.a, pr.b}, {pr.b, pr.a}} {
				st := vipStatus(t, ctx, bin, d[0])
				p, ok := vipPeerOf(st, d[1].name)
				switch {
				case !ok:
					t.Errorf("%s's status lists no peer %s: %+v", d[0].name, d[1].name, st)
				case !slices.Contains(pr.paths, p.Path):
					t.Errorf("%s's peer %s: path %q, want one of %v", d[0].name, d[1].name, p.Path, pr.paths)
				case !slices.Contains(p.Addrs, d[1].v4.String()) || !slices.Contains(p.Addrs, d[1].v6.String()):
					t.Errorf("%s's peer %s: addresses %v, want %s and %s", d[0].name, d[1].name, p.Addrs, d[1].v4, d[1].v6)
				case p.SentPackets == 0 || p.RecvPackets == 0 || p.SentBytes < 1<<20 || p.RecvBytes < 1<<20:
					t.Errorf("%s's peer %s: traffic %+v, want packets both ways and the flows' MiB", d[0].name, d[1].name, p)
				}
				t.Logf("%s -> %s: path %s (%v), sent %d packets %d bytes, received %d packets %d bytes", d[0].name, d[1].name, p.Path, p.Paths, p.SentPackets, p.SentBytes, p.RecvPackets, p.RecvBytes)
			}
		}
	})

	t.Run("NoCertificate", func(t *testing.T) {
		// a node without a certificate in a grid with a CA: refused at
		// attach, before any device is made
		off := fileSize(L.hubs["pub1"].log)
		p := startIn(t, hub2, "nocert", bin, "node", "--name", "nocert", "--hub", hubAddr(hub1), "--vip", "--control", "@nocert")
		if code := exited(t, p, 30*time.Second); code == 0 {
			t.Fatalf("a node without a certificate runs the virtual network:\n%s", p.output())
		}
		// (it knows the hub by its ID only: it checks no certificates)
		if s := p.output(); !strings.Contains(s, "not admitted by") || !strings.Contains(s, "self-signed") {
			t.Errorf("the node's error does not name the hub's reason:\n%s", s)
		}
		logLine(t, "pub1's record", L.hubs["pub1"].log, off, 10*time.Second, "not admitted", "self-signed")
		if out, _, err := tryIn(ctx, hub2, nil, "ip", "link", "show", "gridlink0"); err == nil {
			t.Errorf("a refused node left a device:\n%s", out)
		}
	})

	t.Run("NonMember", func(t *testing.T) {
		lax := L.issue(ca.Hub, "lax")
		lh := startIn(t, hub2, "lax", tbin, "hub", "--name", "lax", "--listen", "0.0.0.0:7947", "--control", "@lax", "--peer", hubAddr(hub1),
			"--key", lax.Key, "--cert", lax.Cert, "--testing-unchecked-cert")
		lh.waitLog(t, "linked to", 20*time.Second)
		off := fileSize(pub.p.log)
		in := startVIPNode(t, tbin, hub2, "intruder", fmt.Sprintf("%s:7947", hub2.PrimaryAddr()), append([]string{"--control", "@intruder"}, outsider.args...)...)
		// no reply to 3 pings (3 s for the last): the connection the
		// first packet opens is refused end to end, as both logs say
		// below, and pub-n's counters show no packet of the intruder's
		// arrived later (vipPing's 30 s deadline, for the first packets
		// of a pair that works, was waited out here)
		if _, _, err := tryIn(ctx, in.h, nil, "ping", "-n", "-c", "3", "-i", "0.3", "-W", "3", pub.v4.String()); err == nil {
			t.Fatalf("a node of another CA pings pub-n over the virtual network")
		}
		logLine(t, "the intruder's record", in.p.log, 0, 10*time.Second, "vip: ", "not admitted by pub-n", outsider.reason)
		logLine(t, "pub-n's record", pub.p.log, off, 10*time.Second, outsider.short, "not admitted", outsider.reason)
		st := vipStatus(t, ctx, bin, pub)
		if p, ok := vipPeerOf(st, "intruder"); ok && p.RecvPackets > 0 {
			t.Errorf("pub-n received %d packets from the intruder", p.RecvPackets)
		}
		if strings.Contains(fmt.Sprint(st.Peers), outsider.short) {
			t.Errorf("pub-n lists the intruder as a peer: %+v", st.Peers)
		}
	})
}
