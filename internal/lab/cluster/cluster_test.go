package cluster

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

var testHosts = []Host{
	{Name: "das3v-n1", Addr: netip.MustParseAddr("198.51.100.10"), NS: "gl-das3v-n1"},
	{Name: "g5k-n1", Addr: netip.MustParseAddr("198.51.100.26"), NS: "gl-g5k-n1"},
	{Name: "hiroshi-n1", Addr: netip.MustParseAddr("198.51.100.42"), NS: "gl-hiroshi-n1"},
	{Name: "desktop-pc", Addr: netip.MustParseAddr("198.51.100.58"), NS: "gl-desktop-pc"},
}

func TestHostsText(t *testing.T) {
	got := string(hostsText(testHosts))
	for _, want := range []string{"127.0.0.1 localhost\n", "198.51.100.26 g5k-n1\n", "198.51.100.58 desktop-pc\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("hosts file lacks %q:\n%s", want, got)
		}
	}
}

func TestKnownHostsLine(t *testing.T) {
	pub, err := writeKey(t.TempDir() + "/k")
	if err != nil {
		t.Fatal(err)
	}
	line := knownHostsLine(testHosts[1], 2222, pub)
	if !strings.HasPrefix(line, "[g5k-n1]:2222,[198.51.100.26]:2222 ssh-ed25519 ") {
		t.Errorf("known_hosts line on 2222: %q", line)
	}
	if line := knownHostsLine(testHosts[1], 22, pub); !strings.HasPrefix(line, "g5k-n1,198.51.100.26 ssh-ed25519 ") {
		t.Errorf("known_hosts line on 22: %q", line)
	}
	// ssh parses it back to the same key, under both names
	_, hosts, key, _, _, err := ssh.ParseKnownHosts([]byte(line))
	if err != nil || len(hosts) != 2 || string(key.Marshal()) != string(pub.Marshal()) {
		t.Errorf("ParseKnownHosts: %v %v", hosts, err)
	}
}

func TestCoveringPrefix(t *testing.T) {
	if got := coveringPrefix(testHosts); got != netip.MustParsePrefix("198.51.100.0/24") {
		t.Errorf("covering prefix of sites4 = %v", got)
	}
	vip := []Host{{Addr: netip.MustParseAddr("100.96.3.4")}, {Addr: netip.MustParseAddr("100.111.0.9")}}
	if got := coveringPrefix(vip); got != netip.MustParsePrefix("100.96.0.0/12") {
		t.Errorf("covering prefix of two virtual addresses = %v", got)
	}
}

func TestMPIRunArgs(t *testing.T) {
	c := &Cluster{cfg: Config{Hosts: testHosts, Dir: "/scratch", Net: netip.MustParsePrefix("100.96.0.0/12")}}
	argv := strings.Join(c.MPIRunArgs("/scratch/hostfile", "/scratch/allreduce.py", MPIJob{Hosts: []string{"a", "b", "c", "d"}, MaxBytes: 1 << 20}), " ")
	for _, want := range []string{
		"--hostfile /scratch/hostfile --np 4 ",
		"--mca plm_rsh_args -F /scratch/ssh_config ",
		"--mca btl self,tcp ",
		"--mca mpi_yield_when_idle 1 ",
		"--mca btl_tcp_if_include 100.96.0.0/12 --mca oob_tcp_if_include 100.96.0.0/12 ",
		"/usr/bin/python3 /scratch/allreduce.py --max-bytes 1048576",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("mpirun command line lacks %q:\n%s", want, argv)
		}
	}
	// another agent than ssh: plm_rsh_agent is it, and no ssh configuration
	c.cfg.Agent = []string{"/opt/gridlink", "exec"}
	argv = strings.Join(c.MPIRunArgs("/scratch/hostfile", "/scratch/allreduce.py", MPIJob{Hosts: []string{"a", "b"}}), " ")
	if !strings.Contains(argv, "--mca plm_rsh_agent /opt/gridlink exec --mca plm_rsh_no_tree_spawn 1 ") || strings.Contains(argv, "ssh") {
		t.Errorf("mpirun command line with gridlink exec as the agent:\n%s", argv)
	}
	if got := string(hostfileText([]string{"g5k-n1.grid", "desktop-pc.grid"})); got != "g5k-n1.grid slots=1\ndesktop-pc.grid slots=1\n" {
		t.Errorf("hostfile: %q", got)
	}
}

// a result as the program prints it for 4 ranks and vectors of 8
const goodResult = `{"size": 4, "hosts": ["a", "b", "c", "d"], "allreduce": {"sum_ranks": 6, "max_rank": 3, "min_rank": 0, "vector_len": 8, "double_sum": 160.0, "int64_sum": 496, "bad_elements": 0}, "pingpong": [{"peer": 1, "host": "b", "latency_us": 5100.5, "bandwidth": [{"bytes": 1024, "us": 5200.0, "mib_per_s": 0.19}, {"bytes": 4096, "us": 5400.0, "mib_per_s": 0.72}]}, {"peer": 2, "host": "c", "latency_us": 5000.0, "bandwidth": []}, {"peer": 3, "host": "d", "latency_us": 5000.0, "bandwidth": []}]}`

func TestMPIResultCheck(t *testing.T) {
	out := "Warning: something Open MPI says\n" + goodResult + "\n"
	r, err := ParseMPIResult([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"a", "b", "c", "d"}
	if err := r.Check(hosts); err != nil {
		t.Fatalf("a correct result: %v", err)
	}
	table := r.Table()
	if !strings.Contains(table, "1KiB") || !strings.Contains(table, "4KiB") || !strings.Contains(table, "5100") {
		t.Errorf("table:\n%s", table)
	}

	for name, spoil := range map[string]func(*MPIResult){
		"sum":      func(r *MPIResult) { r.Allreduce.SumRanks = 5 },
		"doubles":  func(r *MPIResult) { r.Allreduce.DoubleSum += 1 },
		"int64s":   func(r *MPIResult) { r.Allreduce.Int64Sum-- },
		"elements": func(r *MPIResult) { r.Allreduce.BadElements = 1 },
		"hosts":    func(r *MPIResult) { r.Hosts[2] = "a" },
		"pingpong": func(r *MPIResult) { r.PingPong = r.PingPong[:1] },
	} {
		r, _ := ParseMPIResult([]byte(goodResult))
		spoil(r)
		var ce *CheckError
		if err := r.Check(hosts); !errors.As(err, &ce) || len(ce.Problems) != 1 {
			t.Errorf("%s spoiled: %v", name, err)
		}
	}
	if _, err := ParseMPIResult([]byte("no json here\n")); err == nil {
		t.Error("output without a result parsed")
	}
}

func TestWrap(t *testing.T) {
	c := &Cluster{cfg: Config{Hosts: testHosts, Dir: "/scratch"}}
	argv := strings.Join(c.wrap(testHosts[1], []string{"ssh", "x"}), " ")
	if !strings.HasPrefix(argv, "netns exec gl-g5k-n1 unshare --uts -- sh -c ") ||
		!strings.Contains(argv, "mount --bind") || !strings.HasSuffix(argv, " sh g5k-n1 /scratch/hosts ssh x") {
		t.Errorf("wrapped: %s", argv)
	}
	c.cfg.SystemNames = true
	if argv := strings.Join(c.wrap(testHosts[1], []string{"ssh", "x"}), " "); strings.Contains(argv, "mount --bind") {
		t.Errorf("wrapped with the system's names: %s", argv)
	}
}
