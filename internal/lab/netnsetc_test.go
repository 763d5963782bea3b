package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What the lab wrote in /etc/netns, and what a node killed in a lab
// namespace left there, goes with the lab; what others wrote there stays.
func TestRemoveNameLeftovers(t *testing.T) {
	dir := t.TempDir()
	write := func(ns, name, text string) string {
		d := filepath.Join(dir, ns)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, name)
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	ours := "# gridlink: the virtual network's names (NODE.grid) through the node's name server; removed when the node stops\nnameserver 127.0.0.153\n"
	left := write(Prefix+"das3v-n1", "resolv.conf", ours)
	theirs := write(Prefix+"g5k-n1", "resolv.conf", "nameserver 192.0.2.1\n")
	hosts := write(Prefix+"hiroshi-fe", "hosts", "10.0.0.1 x\n")
	hostsConf := write(Prefix+"hiroshi-fe", "resolv.conf", ours)
	other := write("other-ns", "resolv.conf", ours)
	labHosts := write(Prefix+"a-fe", "hosts", etcMark+"the lab's hosts\n127.0.0.1 localhost\n")
	labConf := write(Prefix+"a-fe", "resolv.conf", etcMark+"no name server\n")
	othersLab := write("other-ns", "hosts", etcMark+"the lab's hosts\n")
	if got, want := etcOurs(dir), []string{labHosts, labConf, left, hostsConf}; !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("the lab's files %v, want %v", got, want)
	}
	got := removeNameLeftovers(dir)
	want := []string{left, filepath.Dir(left), hostsConf, labHosts, labConf, filepath.Dir(labHosts)}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	for _, f := range []string{theirs, hosts, other, othersLab} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", f, err)
		}
	}
}

func sorted(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return ss
}

// Up's plan gives every lab namespace a hosts file with the lab's hosts
// and a resolv.conf without a name server; writing one leaves a file of
// someone else's as it is.
func TestEtcPlan(t *testing.T) {
	topo, _, err := Load("routed", nil)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]Step{}
	for _, s := range Plan(topo) {
		if s.Tool == "file" {
			files[s.File] = s
		}
	}
	for _, ns := range []string{InetNS, SwitchNS, "gl-a-gw", "gl-a-fe", "gl-a-n1", "gl-b-fe"} {
		hosts, ok := files[filepath.Join(EtcNetns, ns, "hosts")]
		if body := strings.Join(hosts.Body, "\n"); !ok || !strings.Contains(body, "198.51.100.10 a-fe\n") || !strings.Contains(body, "10.6.0.11 b-n1\n") {
			t.Errorf("%s: no hosts file with the lab's hosts: %q", ns, body)
		}
		conf, ok := files[filepath.Join(EtcNetns, ns, "resolv.conf")]
		if body := strings.Join(conf.Body, "\n"); !ok || strings.Contains(body, "nameserver") || !strings.HasPrefix(body, etcMark) {
			t.Errorf("%s: resolv.conf %q, want the lab's without a name server", ns, body)
		}
		if !strings.Contains(hosts.Shell(), "cat > "+hosts.File+" <<'EOF'") {
			t.Errorf("dry run of %s: %s", hosts.What, hosts.Shell())
		}
	}

	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs", "hosts")
	if err := os.MkdirAll(filepath.Dir(theirs), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(theirs, []byte("10.0.0.1 x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "gl-a-fe", "hosts")
	for _, f := range []string{theirs, mine, mine} {
		if err := writeEtc(Step{What: "test", Tool: "file", File: f, Body: []string{etcMark + "x", "10.0.0.2 y"}}); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(theirs); string(b) != "10.0.0.1 x\n" {
		t.Errorf("someone else's file rewritten: %q", b)
	}
	if b, _ := os.ReadFile(mine); string(b) != etcMark+"x\n10.0.0.2 y\n" {
		t.Errorf("the lab's file: %q", b)
	}
}
