package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/cluster"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

func TestMain(m *testing.M) { labtest.Main(m) }

// sites4 is this package's lab: four sites, one public host each, 10 ms
// round trips between every two.
const sites4 = "testdata/sites4.topo"

// sites4Hosts are the cluster's hosts on sites4, launcher first.
var sites4Hosts = []string{"das3v-n1", "g5k-n1", "hiroshi-n1", "desktop-pc"}

// need installs Debian packages before the lab comes up (outside any
// timing); a machine that cannot skips the test, CI fails it.
func need(t *testing.T, pkgs ...string) {
	t.Helper()
	labtest.RequireRoot(t)
	if err := cluster.Install(context.Background(), pkgs...); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// installErr installs Debian packages before the lab comes up (outside
// any timing) and says why it could not; nil under CI=true, which fails
// the test instead.
func installErr(t *testing.T, pkgs ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := cluster.Install(ctx, pkgs...)
	if err != nil && os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	return err
}

// TestClusterSites4 runs the cluster's cases on plain IP, each a subtest
// of its own, on one bring-up of sites4 and one cluster on its four
// hosts: ssh by name, an MPI job, a file system mounted across sites. A
// case whose packages could not be installed is skipped (outside CI).
func TestClusterSites4(t *testing.T) {
	need(t, cluster.SSHPackages...)
	mpiErr := installErr(t, cluster.MPIPackages...)
	// sshfs: without it the file system case's probe still runs
	fsErr := installErr(t, cluster.SSHFSPackages...)
	c, topo := startSites4(t)
	t.Run("SSH", func(t *testing.T) { clusterSSH(t, c) })
	t.Run("MPI", func(t *testing.T) {
		if mpiErr != nil {
			t.Skip(mpiErr)
		}
		clusterMPI(t, c, topo)
	})
	t.Run("FileSystem", func(t *testing.T) { clusterFileSystem(t, c, fsErr) })
}

// startSites4 brings sites4 up and starts the cluster on its four hosts.
func startSites4(t *testing.T) (*cluster.Cluster, *topology.Topology) {
	t.Helper()
	topo := labtest.Up(t, sites4, nil)
	var hosts []*topology.Host
	for _, name := range sites4Hosts {
		hosts = append(hosts, labtest.Host(t, topo, name))
	}
	c, err := cluster.Start(context.Background(), cluster.Config{Hosts: cluster.FromTopology(hosts...), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, topo
}

// Every host reaches every other by name with ssh: each host's own sshd,
// host keys, a client key and known_hosts made for the run, the names in
// the hosts file every process of the cluster sees, each host under its
// own host name; another host's key and a login without the key are
// refused.
func clusterSSH(t *testing.T, c *cluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, from := range sites4Hosts {
		for _, to := range sites4Hosts {
			if from == to {
				continue
			}
			out, err := c.SSH(ctx, from, to, "hostname")
			if err != nil {
				t.Fatalf("ssh %s -> %s: %v", from, to, err)
			}
			if got := strings.TrimSpace(string(out)); got != to {
				t.Errorf("ssh %s -> %s: hostname %q", from, to, got)
			}
		}
	}
	// strict: another host's key is refused, and so is a login
	// without the run's key
	_, err := c.Run(ctx, "das3v-n1", "ssh", "-F", c.SSHConfig(), "-o", "HostKeyAlias=g5k-n1", "hiroshi-n1", "true")
	var re *cluster.RunError
	if !errors.As(err, &re) || !strings.Contains(re.Stderr, "Host key verification failed") {
		t.Errorf("ssh to hiroshi-n1 expecting g5k-n1's host key: %v", err)
	}
	_, err = c.Run(ctx, "das3v-n1", "ssh", "-F", c.SSHConfig(), "-o", "PubkeyAuthentication=no", "hiroshi-n1", "true")
	if !errors.As(err, &re) || !strings.Contains(re.Stderr, "Permission denied") {
		t.Errorf("ssh to hiroshi-n1 without the key: %v", err)
	}
}

// An MPI job from Debian's packages across four sites: mpirun on das3v-n1
// launches one rank on each host over ssh by host name, the allreduce results are
// right, each rank ran where the hostfile put it, and rank 0's ping-pong
// with each peer crossed the emulated wide-area links.
func clusterMPI(t *testing.T, c *cluster.Cluster, topo *topology.Topology) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// the sshd logs from here on (the cluster served other cases before)
	logFrom := map[string]int64{}
	for _, name := range sites4Hosts {
		logFrom[name] = fileSize(c.SSHDLog(name))
	}

	start := time.Now()
	r, warnings, err := c.MPIRun(ctx, cluster.MPIJob{Launcher: sites4Hosts[0], Hosts: sites4Hosts})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mpirun across %d sites in %v", len(sites4Hosts), time.Since(start).Round(time.Millisecond))
	if warnings != "" {
		t.Logf("mpirun's standard error:\n%s", warnings)
	}
	if err := r.Check(sites4Hosts); err != nil {
		t.Fatal(err)
	}
	t.Logf("allreduce over %d ranks: sum of ranks %d, %d-element double and int64 vectors right (sums %v, %d)",
		r.Size, r.Allreduce.SumRanks, r.Allreduce.VectorLen, r.Allreduce.DoubleSum, r.Allreduce.Int64Sum)
	t.Logf("ping-pong (one way: half the mean round trip):\n%s", r.Table())
	// every message crossed a wide-area link: no one-way time under
	// the link's delay (half its round trip)
	oneWay := topo.Default.Delay
	for _, pp := range r.PingPong {
		if lat := time.Duration(pp.LatencyUS * 1e3); lat < oneWay {
			t.Errorf("latency to %s %v, under the link's one-way delay %v", pp.Host, lat, oneWay)
		}
	}
	// the ranks were launched over ssh, each host's sshd says from where
	launcher, _ := c.Host(sites4Hosts[0])
	for _, name := range sites4Hosts[1:] {
		log := readFrom(c.SSHDLog(name), logFrom[name])
		if want := "Accepted publickey for root from " + launcher.Addr.String(); !bytes.Contains(log, []byte(want)) {
			t.Errorf("%s's sshd log lacks %q:\n%s", name, want, log)
		}
	}
}

// A file system mounted across sites: NFS if this kernel serves it inside
// a lab namespace (ProbeNFS's evidence is logged either way), else sshfs:
// g5k-n1 mounts a directory of hiroshi-n1 by name; a file written through
// the mount reads back byte-identical on the server and one written on the
// server reads back through the mount; nothing of the mount is visible
// outside the client's own mount namespace. installErr is why sshfs
// could not be installed, if it could not.
func clusterFileSystem(t *testing.T, c *cluster.Cluster, installErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, server := "g5k-n1", "hiroshi-n1"
	// the server's sshd log from here on (the cluster served other cases
	// before)
	logFrom := fileSize(c.SSHDLog(server))
	sh, _ := c.Host(server)

	probe := cluster.ProbeNFS(ctx, sh.NS)
	t.Logf("NFS in a lab namespace: server %v, client %v, FUSE %v:\n  %s", probe.Server, probe.Client, probe.FUSE, strings.Join(probe.Evidence, "\n  "))
	if probe.Server && probe.Client {
		t.Log("this kernel could serve NFS inside a namespace; the harness mounts with sshfs (its NFS path is not built)")
	}
	if !probe.FUSE {
		t.Fatal("no FUSE for sshfs on this machine")
	}
	if installErr != nil {
		t.Skip(installErr)
	}

	export := filepath.Join(t.TempDir(), "export")
	if err := os.Mkdir(export, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	m, err := c.MountSSHFS(ctx, client, server, export, mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	scratch := t.TempDir()
	data := func(name string, n int) (string, []byte) {
		b := make([]byte, n)
		rand.Read(b)
		p := filepath.Join(scratch, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p, b
	}

	// client → server
	src, want := data("up", 3<<20+17)
	if _, err := m.Run(ctx, "cp", src, m.Path("from-client")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(export, "from-client")); !bytes.Equal(got, want) {
		t.Fatalf("the file written through the mount is %d bytes on the server, not the %d written", len(got), len(want))
	}
	sum, err := c.Run(ctx, server, "sha256sum", filepath.Join(export, "from-client"))
	if wantSum := fmt.Sprintf("%x", sha256.Sum256(want)); err != nil || !strings.HasPrefix(string(sum), wantSum) {
		t.Errorf("sha256sum on the server: %q, %v; want %s", sum, err, wantSum)
	}

	// server → client
	src2, want2 := data("down", 1<<20+5)
	if _, err := c.Run(ctx, server, "cp", src2, filepath.Join(export, "from-server")); err != nil {
		t.Fatal(err)
	}
	got, err := m.Run(ctx, "cat", m.Path("from-server"))
	if err != nil || !bytes.Equal(got, want2) {
		t.Fatalf("the server's file read through the mount: %d bytes, %v; want %d bytes", len(got), err, len(want2))
	}
	ls, _ := m.Run(ctx, "ls", m.Dir)
	if strings.Fields(string(ls))[0] != "from-client" || len(strings.Fields(string(ls))) != 2 {
		t.Errorf("ls of the mount: %q", ls)
	}

	// outside the client's mount namespace the mount point is empty
	if entries, err := os.ReadDir(mnt); err != nil || len(entries) != 0 {
		t.Errorf("the mount point seen from outside: %v, %v", entries, err)
	}
	// the bytes came by ssh from the client's address
	ch, _ := c.Host(client)
	if log := readFrom(c.SSHDLog(server), logFrom); !bytes.Contains(log, []byte("Accepted publickey for root from "+ch.Addr.String())) {
		t.Errorf("%s's sshd did not log the client's login:\n%s", server, log)
	}
	if err := m.Close(); err != nil {
		t.Errorf("unmount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(export, "from-client")); err != nil {
		t.Errorf("after unmounting, the server's file: %v", err)
	}
}

// fileSize is where a log file ends now: later checks look past it.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom is the file at path from byte off on (all of it if it is
// shorter now: rewritten).
func readFrom(path string, off int64) []byte {
	b, _ := os.ReadFile(path)
	if int64(len(b)) < off {
		return b
	}
	return b[off:]
}
