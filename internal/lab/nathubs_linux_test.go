package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// natHubs is the bring-up of nat-hubs for issue 17's hub-link cases (item
// 9) and the cases of item 10 that need a whole overlay: the gridlink
// binary run in lab hosts, certified by the lab CA.
type natHubs struct {
	t    *testing.T
	topo *topology.Topology
	bin  string
	hubs map[string]*proc // by hub name
	// eastKey is the key and certificate east's hub started with
	eastKey lab.Issued
}

func (L *natHubs) host(name string) *topology.Host { return labtest.Host(L.t, L.topo, name) }

func (L *natHubs) issue(role ca.Role, name string) lab.Issued {
	c, err := lab.OpenCA()
	if err != nil {
		L.t.Fatal(err)
	}
	i, err := c.Issue(role, name)
	if err != nil {
		L.t.Fatal(err)
	}
	return i
}

// linkerLess orders identities as hubs do to decide which of two links
// between them to keep (the one the smaller dialled).
func linkerLess(a, b identity.ID) bool { return string(a[:]) < string(b[:]) }

// offererLess orders identities as hubs do to decide which of two
// offers a splice (the smaller).
func offererLess(a, b identity.ID) bool { return a.String() < b.String() }

func hubAddr(h *topology.Host) string { return fmt.Sprintf("%s:7946", h.PrimaryAddr()) }

// startHub runs hub name in h with the certificate i, linking to peers.
func (L *natHubs) startHub(h *topology.Host, name string, i lab.Issued, peers ...*topology.Host) *proc {
	argv := []string{L.bin, "hub", "--name", name, "--listen", "0.0.0.0:7946"}
	for _, p := range peers {
		argv = append(argv, "--peer", hubAddr(p))
	}
	p := startIn(L.t, h, "hub-"+name, append(argv, i.Args()...)...)
	L.hubs[name] = p
	return p
}

// startNode runs node name in h, attaching to hubs in order.
func (L *natHubs) startNode(h *topology.Host, name string, hubs ...*topology.Host) *proc {
	argv := []string{L.bin, "node", "--name", name, "--verbose"}
	for _, hb := range hubs {
		argv = append(argv, "--hub", hubAddr(hb))
	}
	return startIn(L.t, h, name, append(argv, L.issue(ca.Node, name).Args()...)...)
}

// routes is the hub's route table in h, or an error while it does not
// answer.
func (L *natHubs) routes(h *topology.Host) ([]status.Route, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, errb, err := tryIn(ctx, h, nil, L.bin, "status", "--hub", "--json")
	if err != nil {
		return nil, fmt.Errorf("status --hub on %s: %v: %s", h.ID(), err, errb)
	}
	var st status.Hub
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("status --hub on %s: %v: %s", h.ID(), err, out)
	}
	return st.Routes, nil
}

// reachable reports whether the hub in h has a route to a hub named name
// (with identity id unless id is zero).
func (L *natHubs) reachable(h *topology.Host, name string, id identity.ID) bool {
	rs, err := L.routes(h)
	if err != nil {
		return false
	}
	for _, r := range rs {
		if r.Name == name && !r.NextHop.IsZero() && (id.IsZero() || r.Hub == id) {
			return true
		}
	}
	return false
}

// hubChurnWindow is how long the hub logs are watched: four redials of a
// linked peer at the old code's 5 s, and west's first two splice offers
// to east (5 s apart).
const hubChurnWindow = 20 * time.Second

// Issue 17 on nat-hubs: lab cases of what only in-process tests showed,
// each failing on the code before its fix:
//
//   - PeersQuiet: two public hubs that name each other as
//     peers, the one with the larger ID started first (its redials back
//     off to 5 s), so that the other's link is up before its next dial:
//     the other drops that dial as a duplicate; the dialler must learn
//     whom it reached and stay quiet (item 9: the peer logged
//     "already linked ... dropping the duplicate link" every 5 s).
//   - SpliceQuiet: west's hub learns of east's through the public ones,
//     cannot dial it (both behind NATs) and offers it splices, which east
//     refuses (its NAT picks random ports): west backs off and logs the
//     failure once, not at every retry (item 9: hubs retried splices to
//     hubs that are not neighbours, logging each).
//   - CpProgress: gridlink cp -r of a tree of several directories from
//     west to pub: its progress lines count files, not directories, and
//     the first says no "0 B/s" (item 10).
//   - HubDeath: a stream from east-n to west-n's echo, through gridlink
//     forward on east-n, is routed through east's hub, which is killed
//     mid-flight: forward logs the stream's failure naming that hub, a
//     stream from pub-n to west-n carries on, and east-n reaches west-n
//     again through hub1 (item 10).
//   - RestartedHub: east's hub restarts with a fresh key; once the other
//     hubs reach it, none lists its old identity as unreachable (item 9:
//     status --hub kept "unreachable 255" rows).
func TestNATHubs(t *testing.T) {
	L := &natHubs{t: t, bin: gridlinkBin(t), hubs: map[string]*proc{}}
	L.topo = labtest.Up(t, "nat-hubs", nil)
	up := time.Now()
	defer func() { t.Logf("the cases took %v after the bring-up", time.Since(up).Round(100*time.Millisecond)) }()
	hub1, hub2 := L.host("pub-hub1"), L.host("pub-hub2")
	east, west := L.host("east-hub"), L.host("west-hub")

	// the hub with the larger ID first (the link the smaller dials is the
	// one both keep), naming the other, which does not run yet
	i1, i2 := L.issue(ca.Hub, "pub1"), L.issue(ca.Hub, "pub2")
	type hubSpec struct {
		h    *topology.Host
		name string
		i    lab.Issued
	}
	first, second := hubSpec{hub1, "pub1", i1}, hubSpec{hub2, "pub2", i2}
	if linkerLess(loadID(t, i1.Key), loadID(t, i2.Key)) {
		first, second = second, first
	}
	t.Logf("%s (%s) starts first, %s (%s) later", first.name, first.h.ID(), second.name, second.h.ID())
	L.startHub(first.h, first.name, first.i, second.h)
	// west's hub offers east's splices (the smaller ID offers): east's
	// gets a key with a larger ID than west's
	wk := L.issue(ca.Hub, "west")
	L.eastKey = L.issue(ca.Hub, "east")
	for offererLess(loadID(t, L.eastKey.Key), loadID(t, wk.Key)) {
		L.eastKey = L.issue(ca.Hub, "east")
	}
	L.startHub(east, "east", L.eastKey, hub1)
	L.startHub(west, "west", wk, hub2)
	L.startNode(L.host("pub-n"), "pub-n", hub2)
	L.startNode(L.host("east-n"), "east-n", east, hub1)
	L.startNode(L.host("west-n"), "west-n", west)
	// long enough for the first hub's redials of the other to back off
	// to 5 s (0.25 s doubling)
	time.Sleep(8 * time.Second)
	L.startHub(second.h, second.name, second.i, first.h)
	since := time.Now()
	testwait.Until(t, "the public hubs to link", 15*time.Second, func() bool {
		return L.reachable(first.h, second.name, identity.ID{}) && L.reachable(second.h, first.name, identity.ID{})
	})

	t.Run("CpProgress", L.cpProgress)
	streams := L.startStreams(t)
	t.Logf("streams up %v after the second public hub started", time.Since(since).Round(100*time.Millisecond))

	time.Sleep(time.Until(since.Add(hubChurnWindow)))
	t.Run("PeersQuiet", func(t *testing.T) { L.peersQuiet(t, since) })
	t.Run("SpliceQuiet", func(t *testing.T) { L.spliceQuiet(t, since) })
	t.Run("HubDeath", func(t *testing.T) { L.hubDeath(t, streams) })
	t.Run("RestartedHub", L.restartedHub)
}

// logLines counts the lines of hub name's log containing every one of
// subs, by what follows the prefix `after` (up to a colon or space).
func (L *natHubs) logLines(name, after string, subs ...string) map[string]int {
	n := map[string]int{}
	for _, line := range strings.Split(L.hubs[name].output(), "\n") {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if _, rest, found := strings.Cut(line, after); ok && found {
			key, _, _ := strings.Cut(rest, ":")
			key, _, _ = strings.Cut(key, " ")
			n[key]++
		}
	}
	return n
}

// peersQuiet: over the window, no hub drops a duplicate link from the same
// hub more than once.
func (L *natHubs) peersQuiet(t *testing.T, since time.Time) {
	t.Logf("hub logs after %v", time.Since(since).Round(time.Second))
	for name := range L.hubs {
		dups := L.logLines(name, "already linked to hub ", "dropping the duplicate link")
		for peer, n := range dups {
			if n > 1 {
				t.Errorf("hub %s dropped a duplicate link from hub %s %d times in %v, want at most once\n%s",
					name, peer, n, hubChurnWindow, tail(L.hubs[name].output()))
			}
		}
		t.Logf("hub %s: duplicate links dropped %v", name, dups)
	}
}

// spliceQuiet: west's hub tried to splice a link to east's, and no hub
// logged the same failed splice twice (a failure is logged again only
// when its reason changes).
func (L *natHubs) spliceQuiet(t *testing.T, since time.Time) {
	for name, p := range L.hubs {
		same := map[string]int{}
		for _, line := range strings.Split(p.output(), "\n") {
			if _, msg, ok := strings.Cut(line, "splice a link to "); ok {
				same[msg]++
			}
		}
		for msg, n := range same {
			if n > 1 {
				t.Errorf("hub %s logged %d times in %v: splice a link to %s\nwant once (retries back off quietly)",
					name, n, time.Since(since).Round(time.Second), msg)
			}
		}
		t.Logf("hub %s: failed splices logged %v", name, L.logLines(name, "splice a link to "))
	}
	if L.logLines("west", "splice a link to ")["east"] == 0 {
		t.Errorf("west's hub did not try to splice a link to east's (the situation is not there)\n%s", tail(L.hubs["west"].output()))
	}
}
