// Package topologies holds the lab topologies that ship with gridlab
// (grid6, wan, routed, nat-zoo, nat-reject, nat-hubs, sshsite, hubpaths) as data files embedded in the binary. The format is
// documented in package topology, which parses them.
package topologies

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.topo
var files embed.FS

// Ext is the file name extension of topology files.
const Ext = ".topo"

// Source returns the text of the built-in topology name (without Ext).
func Source(name string) ([]byte, bool) {
	b, err := files.ReadFile(name + Ext)
	return b, err == nil
}

// Names lists the built-in topologies.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), Ext))
	}
	sort.Strings(names)
	return names
}
