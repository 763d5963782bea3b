package lab

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// EtcNetns is where `ip netns exec NS` finds the files it mounts over
// /etc for NS. Up writes two there for every lab namespace (etcSteps):
//
//   - hosts: the lab's hosts by name (each host's ID, e.g. das3v-fe, for
//     its primary address, as package cluster names them), localhost, and
//     this machine's host name (which lab namespaces share) on 127.0.1.1;
//   - resolv.conf without a name server: the machine's servers are out of
//     a lab namespace's reach, so a lookup there waited for them twice
//     5 s; with none named, glibc (and Go) ask 127.0.0.1, where nothing
//     listens on port 53 in a lab namespace, and a name the hosts file
//     does not know fails at once.
//
// A `gridlink node --vip` in a lab host replaces the resolv.conf by its
// own (NS = HostNS) and puts the lab's back when it stops. Down removes
// what the lab and nodes killed in it left (removeNameLeftovers), also
// after a crash. Only processes started by `ip netns exec` see these
// files: Go code run by netns.Do keeps the root namespace's /etc.
const EtcNetns = "/etc/netns"

// etcMark starts the files the lab writes in EtcNetns.
const etcMark = "# gridlab: "

// nameMark starts the line a gridlink node writes before its name
// server in a resolv.conf (gridlink's dns.go).
var nameMark = []byte("# gridlink: the virtual network's names")

// HostName is a line of a hosts file: a name and the address it stands
// for.
type HostName struct {
	Name string
	Addr netip.Addr
}

// HostsText is a hosts file: head (comment lines, each starting with #),
// localhost, then a line per host.
func HostsText(head string, hosts []HostName) []byte {
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "%s %s\n", h.Addr, h.Name)
	}
	return []byte(b.String())
}

// LabHosts are the names of t's hosts: each host's ID for its primary
// address.
func LabHosts(t *topology.Topology) []HostName {
	var out []HostName
	for _, s := range t.Sites {
		for _, h := range s.Hosts {
			out = append(out, HostName{Name: h.ID(), Addr: h.PrimaryAddr()})
		}
	}
	return out
}

// etcSteps write the hosts file and resolv.conf of each of namespaces
// (see EtcNetns).
func etcSteps(t *topology.Topology, namespaces []string) []Step {
	hosts := LabHosts(t)
	if name, err := os.Hostname(); err == nil && name != "" && !strings.ContainsAny(name, " \t\n#") {
		hosts = append(hosts, HostName{Name: name, Addr: netip.MustParseAddr("127.0.1.1")})
	}
	hostsText := strings.TrimSuffix(string(HostsText(etcMark+"the lab's hosts by name; gridlab down removes it\n", hosts)), "\n")
	resolv := etcMark + "no name server: a lookup of a name the hosts file does not know fails at once (127.0.0.1, where nothing listens, is asked); gridlab down removes it\noptions timeout:1 attempts:1"
	var steps []Step
	for _, ns := range namespaces {
		dir := filepath.Join(EtcNetns, ns)
		steps = append(steps,
			Step{What: "hosts file of " + ns, Tool: "file", File: filepath.Join(dir, "hosts"), Body: strings.Split(hostsText, "\n")},
			Step{What: "resolver of " + ns, Tool: "file", File: filepath.Join(dir, "resolv.conf"), Body: strings.Split(resolv, "\n")})
	}
	return steps
}

// writeEtc writes a file step: its lines to its file, in a directory
// made for it, unless the file is there and not the lab's (someone
// else's stays as it is).
func writeEtc(s Step) error {
	if b, err := os.ReadFile(s.File); err == nil && !bytes.HasPrefix(b, []byte(etcMark)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.File), 0o755); err != nil {
		return fmt.Errorf("lab: %s: %w", s.What, err)
	}
	if err := os.WriteFile(s.File, []byte(strings.Join(s.Body, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %s: %w", s.What, err)
	}
	return nil
}

// etcOurs lists the files in dir (EtcNetns) that are the lab's to
// remove: those the lab wrote, and a resolv.conf a gridlink node in a lab
// namespace wrote (and, killed, left).
func etcOurs(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, Prefix+"*", "*"))
	var ours []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && (bytes.HasPrefix(b, []byte(etcMark)) || filepath.Base(f) == "resolv.conf" && bytes.HasPrefix(b, nameMark)) {
			ours = append(ours, f)
		}
	}
	return ours
}

// removeNameLeftovers removes the lab's files in dir (EtcNetns, etcOurs),
// and a lab namespace's directory when nothing else is in it. Files of
// others stay. It returns what it removed.
func removeNameLeftovers(dir string) []string {
	var removed []string
	for _, f := range etcOurs(dir) {
		if os.Remove(f) == nil {
			removed = append(removed, f)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(dir, Prefix+"*"))
	for _, d := range dirs {
		if os.Remove(d) == nil { // only if empty
			removed = append(removed, d)
		}
	}
	return removed
}
