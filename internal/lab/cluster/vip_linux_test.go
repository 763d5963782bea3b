package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/cluster"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/status"
)

// vipHosts are the nodes of TestClusterVIP on grid6, launcher first:
// open sites (das3v, das3d), g5k's non-routed node, hiroshi's node
// behind its ssh-only firewall, the NATed desktop.
var vipHosts = []string{"das3v-n1", "das3d-n1", "g5k-n1", "hiroshi-n1", "desktop-pc"}

// The cluster on grid6's virtual network (issue 19): a gridlink node
// with --vip on five sites' hosts, the cluster's hosts the nodes' names
// NODE.grid at their virtual IPv4 addresses (from the cluster's hosts
// file: node --vip serves no names yet). mpirun on das3v-n1 launches a
// rank on each over ssh by those names, MPI's traffic pinned to the
// virtual prefix: the allreduce results are right; the ping-pong table is
// logged with each peer's path (`gridlink status --json`) and the lab's
// round trip beside it, and with the same pair on plain IP where plain IP
// reaches (das3v-n1 and das3d-n1, both public). The sshds and the ranks
// see their peers' virtual source addresses (the sshd logs; the ranks'
// sockets), and the virtual network dropped nothing as spoofed. Then
// g5k-n1 mounts a directory of hiroshi-n1 with sshfs by name over the
// virtual network, and bytes go both ways through it unchanged (NFS: this
// kernel has none, ProbeNFS's evidence is logged, docs/mpi.md).
func TestClusterVIP(t *testing.T) {
	need(t, append(append(cluster.SSHPackages, cluster.MPIPackages...), cluster.SSHFSPackages...)...)
	bin := gridlinkBin(t)
	topo := labtest.Up(t, "grid6", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var hs []*topology.Host
	for _, n := range vipHosts {
		hs = append(hs, labtest.Host(t, topo, n))
	}
	o, err := matrix.StartOverlayWith(ctx, topo, bin, matrix.Options{VIP: true, Hosts: hs})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	var hosts []cluster.Host
	var names []string
	for _, v := range o.VIPs() {
		hosts = append(hosts, cluster.Host{Name: v.Name + ".grid", Addr: v.V4, NS: lab.HostNS(v.Host)})
		names = append(names, v.Name+".grid")
	}
	c, err := cluster.Start(ctx, cluster.Config{Hosts: hosts, Dir: t.TempDir(), Net: gridlink.DefaultVIPPrefix4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	launcher := names[0]
	for _, n := range names[1:] {
		testwait.Until(t, "ssh "+launcher+" -> "+n+" over the virtual network", 2*time.Minute, func() bool {
			out, err := c.SSH(ctx, launcher, n, "hostname")
			return err == nil && strings.TrimSpace(string(out)) == n
		})
	}

	peers, stopWatch := watchRankPeers(ctx, hosts)
	start := time.Now()
	r, warnings, err := c.MPIRun(ctx, cluster.MPIJob{Launcher: launcher, Hosts: names})
	stopWatch()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mpirun across %d sites over the virtual network in %v", len(names), time.Since(start).Round(time.Millisecond))
	if warnings != "" {
		t.Logf("mpirun's standard error:\n%s", warnings)
	}
	if err := r.Check(names); err != nil {
		t.Fatal(err)
	}
	t.Logf("allreduce over %d ranks: sum of ranks %d, %d-element double and int64 vectors right", r.Size, r.Allreduce.SumRanks, r.Allreduce.VectorLen)

	// the same pair on plain IP, where plain IP reaches both ways
	pc, err := cluster.Start(ctx, cluster.Config{Hosts: cluster.FromTopology(hs[0], hs[1]), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	plain := []string{hs[0].ID(), hs[1].ID()}
	pr, _, err := pc.MPIRun(ctx, cluster.MPIJob{Launcher: plain[0], Hosts: plain})
	if err == nil {
		err = pr.Check(plain)
	}
	if err != nil {
		t.Fatalf("on plain IP: %v", err)
	}

	st, err := o.VIPStatus(ctx, hs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs[1:] {
		if i := slices.IndexFunc(st.Peers, func(p status.VIPPeer) bool { return p.Name == h.ID() }); i < 0 || st.Peers[i].Path == "" {
			t.Errorf("%s's status shows no path to %s: %+v", hs[0].ID(), h.ID(), st.Peers)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("ping-pong (one way: half the mean round trip; MiB/s by message size; ping: ICMP over the same path, mean of 10; load average %s):\n%s",
		strings.Join(strings.Fields(string(load))[:3], " "), vipTable(ctx, topo, hs, hosts, st, r, pr))

	// sshd saw the launcher's virtual address; every rank's MPI
	// connections joined its own virtual address to a peer's
	vaddr := map[netip.Addr]string{}
	for _, h := range hosts {
		vaddr[h.Addr] = h.Name
	}
	for _, h := range hosts[1:] {
		log, _ := os.ReadFile(c.SSHDLog(h.Name))
		if want := "Accepted publickey for root from " + hosts[0].Addr.String(); !bytes.Contains(log, []byte(want)) {
			t.Errorf("%s's sshd log lacks %q:\n%s", h.Name, want, log)
		}
	}
	for i, h := range hosts {
		var seen []string
		for p, local := range peers[h.NS] {
			if local != h.Addr || vaddr[p] == "" {
				t.Errorf("%s: a rank's connection %s <-> %s is not between virtual addresses of the cluster", h.Name, local, p)
			}
			seen = append(seen, vaddr[p])
		}
		slices.Sort(seen)
		t.Logf("%s: the ranks' TCP peers by source address: %v", h.Name, seen)
		if i == 0 && len(seen) < len(hosts)-1 {
			t.Errorf("rank 0 on %s saw connections from %v, want every other rank's virtual address", h.Name, seen)
		}
	}
	if strings.Contains(warnings, "dropped inbound connection") {
		t.Errorf("Open MPI dropped a connection from an unexpected address:\n%s", warnings)
	}
	for _, h := range hs {
		st, err := o.VIPStatus(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Peers {
			t.Logf("%s -> %s: path %s %v, sent %d received %d packets, dropped: queue full %d, connection lost %d",
				h.ID(), p.Name, p.Path, p.Paths, p.SentPackets, p.RecvPackets, p.QueueFullPackets, p.ConnLostPackets)
			if p.SpoofedPackets > 0 {
				t.Errorf("%s dropped %d packets from %s as spoofed", h.ID(), p.SpoofedPackets, p.Name)
			}
		}
		t.Logf("%s: drops %+v", h.ID(), st.Drops)
		if n := st.Drops.SourceNotOursPackets; n > 0 {
			t.Errorf("%s dropped %d packets of its own as not from its address", h.ID(), n)
		}
	}

	t.Run("SSHFS", func(t *testing.T) {
		client, server := "g5k-n1.grid", "hiroshi-n1.grid"
		sh, _ := c.Host(server)
		probe := cluster.ProbeNFS(ctx, sh.NS)
		t.Logf("NFS in a lab namespace (docs/mpi.md): server %v, client %v, FUSE %v:\n  %s", probe.Server, probe.Client, probe.FUSE, strings.Join(probe.Evidence, "\n  "))
		export, mnt := t.TempDir(), filepath.Join(t.TempDir(), "mnt")
		m, err := c.MountSSHFS(ctx, client, server, export, mnt)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		up, down := make([]byte, 3<<20+17), make([]byte, 1<<20+5)
		rand.Read(up)
		rand.Read(down)
		src := filepath.Join(t.TempDir(), "up")
		if err := os.WriteFile(src, up, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := m.Run(ctx, "cp", src, m.Path("up")); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d bytes written through the mount in %v", len(up), time.Since(start).Round(time.Millisecond))
		if got, _ := os.ReadFile(filepath.Join(export, "up")); !bytes.Equal(got, up) {
			t.Fatalf("the file written through the mount is %d bytes on the server, not the %d written", len(got), len(up))
		}
		if err := os.WriteFile(filepath.Join(export, "down"), down, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := m.Run(ctx, "cat", m.Path("down")); err != nil || !bytes.Equal(got, down) {
			t.Fatalf("the server's file read through the mount: %d bytes, %v; want %d bytes", len(got), err, len(down))
		}
		ch, _ := c.Host(client)
		if log, _ := os.ReadFile(c.SSHDLog(server)); !bytes.Contains(log, []byte("Accepted publickey for root from "+ch.Addr.String())) {
			t.Errorf("%s's sshd did not log %s's virtual address:\n%s", server, client, log)
		}
	})
}

// watchRankPeers records, until stop is called, the established TCP
// connections of the MPI ranks (python3) in each host's namespace: peer
// address to local address, by namespace.
func watchRankPeers(ctx context.Context, hosts []cluster.Host) (map[string]map[netip.Addr]netip.Addr, func()) {
	seen := map[string]map[netip.Addr]netip.Addr{}
	for _, h := range hosts {
		seen[h.NS] = map[netip.Addr]netip.Addr{}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, h := range hosts {
				out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", h.NS, "ss", "-Htnp", "state", "established").Output()
				for _, line := range strings.Split(string(out), "\n") {
					// Recv-Q Send-Q LOCAL PEER users:(("python3",...))
					f := strings.Fields(line)
					if len(f) < 5 || !strings.Contains(line, `"python3"`) {
						continue
					}
					l, lerr := netip.ParseAddrPort(f[2])
					p, perr := netip.ParseAddrPort(f[3])
					if lerr == nil && perr == nil && !p.Addr().IsLoopback() {
						seen[h.NS][p.Addr().Unmap()] = l.Addr().Unmap()
					}
				}
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return seen, func() { close(done); wg.Wait() }
}

// vipTable is the ping-pong table of rank 0 over the virtual network
// (r), each peer with its site link's round trip in the lab and its path
// in st, then the plain-IP job's (pr) peer: markdown, for BENCHMARKS.md.
func vipTable(ctx context.Context, topo *topology.Topology, hs []*topology.Host, hosts []cluster.Host, st *status.VIP, r, pr *cluster.MPIResult) string {
	var b strings.Builder
	b.WriteString("| rank 0 (" + r.Hosts[0] + ") to | lab RTT ms | path | ping ms | latency µs | over the link's one way µs |")
	for _, p := range r.PingPong[0].Bandwidth {
		fmt.Fprintf(&b, " %s |", sizeText(p.Bytes))
	}
	b.WriteString("\n|---|---|---|---|---|---|" + strings.Repeat("---|", len(r.PingPong[0].Bandwidth)) + "\n")
	row := func(pp cluster.PingPong, h *topology.Host, path string, addr netip.Addr) {
		rtt := 2 * topo.LinkFor(hs[0].Site.Name, h.Site.Name).Delay
		fmt.Fprintf(&b, "| %s | %.2f | %s | %s | %.0f | %+.0f |", pp.Host, float64(rtt)/1e6, path, pingMS(ctx, hosts[0].NS, addr), pp.LatencyUS, pp.LatencyUS-float64(rtt)/2e3)
		for _, p := range pp.Bandwidth {
			fmt.Fprintf(&b, " %.1f |", p.MiBPerS)
		}
		b.WriteString("\n")
	}
	for _, pp := range r.PingPong {
		h := hs[pp.Peer]
		path := "(no peer in status)"
		for _, p := range st.Peers {
			if p.Name == h.ID() {
				path = p.Path
			}
		}
		row(pp, h, "virtual, "+path, hosts[pp.Peer].Addr)
	}
	for _, pp := range pr.PingPong {
		row(pp, hs[pp.Peer], "plain IP", hs[pp.Peer].PrimaryAddr())
	}
	return b.String()
}

// pingMS is the mean round trip of 10 pings from namespace ns to a, in
// ms, as text ("-" if none came back).
func pingMS(ctx context.Context, ns string, a netip.Addr) string {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", "10", "-i", "0.1", "-w", "10", a.String()).Output()
	// rtt min/avg/max/mdev = 0.211/0.254/0.310/0.030 ms
	_, stats, ok := strings.Cut(string(out), " = ")
	if f := strings.Split(stats, "/"); ok && len(f) >= 2 {
		return f[1]
	}
	return "-"
}

func sizeText(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// gridlinkBin returns the gridlink binary: $GRIDLINK_BIN (make test sets
// it), else one built for this test.
func gridlinkBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("GRIDLINK_BIN"); b != "" {
		return b
	}
	out := filepath.Join(t.TempDir(), "gridlink")
	if b, err := exec.Command("go", "build", "-o", out, "github.com/gridlink/gridlink/cmd/gridlink").CombinedOutput(); err != nil {
		t.Fatalf("build gridlink: %v\n%s", err, b)
	}
	return out
}
