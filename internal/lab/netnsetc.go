package lab

import (
	"bytes"
	"os"
	"path/filepath"
)

// EtcNetns is where `ip netns exec NS` finds the files it mounts over
// /etc for NS: a `gridlink node --vip` in a lab host writes its
// resolv.conf there (NS = HostNS), and removes it when it stops.
const EtcNetns = "/etc/netns"

// nameMark starts the line a gridlink node writes before its name
// server in a resolv.conf (gridlink's dns.go).
var nameMark = []byte("# gridlink: the virtual network's names")

// removeNameLeftovers removes what nodes killed inside lab namespaces
// left in dir (EtcNetns): a lab namespace's resolv.conf that a gridlink
// node wrote, and the namespace's directory when nothing else is in it.
// Files of others stay. It returns what it removed.
func removeNameLeftovers(dir string) []string {
	dirs, _ := filepath.Glob(filepath.Join(dir, Prefix+"*"))
	var removed []string
	for _, d := range dirs {
		f := filepath.Join(d, "resolv.conf")
		if b, err := os.ReadFile(f); err == nil && bytes.HasPrefix(b, nameMark) && os.Remove(f) == nil {
			removed = append(removed, f)
		}
		if os.Remove(d) == nil { // only if empty
			removed = append(removed, d)
		}
	}
	return removed
}
