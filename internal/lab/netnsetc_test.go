package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// What a node killed in a lab namespace left in /etc/netns goes with the
// lab; what others wrote there stays.
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
	got := removeNameLeftovers(dir)
	want := []string{left, filepath.Dir(left), hostsConf}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	for _, f := range []string{theirs, hosts, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", f, err)
		}
	}
}
