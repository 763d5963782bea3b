package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

// hubServer is the hub server's package. A node's program needs the hub
// overlay's client (package hub) only: the node-side packages, vconn and
// every layer above it, must not link the routing server in. The product
// API, the dashboard and command line on it, the binaries and the lab
// start hubs (or link the API that does) and may.
const hubServer = "hub/hubserver"

// mayLinkHubServer lists the packages above vconn that may depend on
// hub/hubserver (a path covers its subpackages; "" is the API package
// gridlink itself).
var mayLinkHubServer = []string{"", "dashboard", "cli", "cmd", "internal/lab"}

// nodeSide tells whether rel (a package path relative to the module) is
// a node-side package: in vconn's layer or above, and not one that may
// start a hub.
func nodeSide(rel string) bool {
	from, _, ok := layerOf(rel)
	vconn, _, _ := layerOf("vconn")
	if !ok || from < vconn {
		return false
	}
	for _, p := range mayLinkHubServer {
		if rel == p || (p != "" && strings.HasPrefix(rel, p+"/")) {
			return false
		}
	}
	return true
}

// hubServerDep is the rule: the dependency of a node-side package rel on
// the hub server, if deps (its transitive dependencies, as `go list
// -deps` lists them) has one; "" otherwise.
func hubServerDep(rel string, deps []string) string {
	if !nodeSide(rel) {
		return ""
	}
	for _, d := range deps {
		if d == module+"/"+hubServer || strings.HasPrefix(d, module+"/"+hubServer+"/") {
			return d
		}
	}
	return ""
}

func TestNodeSideWithoutHubServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if nodeSide(rel) {
			checked++
		}
		if d := hubServerDep(rel, fields[1:]); d != "" {
			t.Errorf("%s links in the hub server (%s): a node-side package may use the hub client (package hub) only", fields[0], d)
		}
	}
	if checked == 0 {
		t.Error("no node-side package checked")
	}
}

// The rule catches a node-side package that would link the server in,
// directly or through another package, and lets the API, the command
// line, the binaries and the lab do so.
func TestHubServerDepRule(t *testing.T) {
	server := module + "/hub/hubserver"
	client := module + "/hub"
	for _, tc := range []struct {
		rel  string
		deps []string
		want string
	}{
		{"vconn", []string{client, module + "/wire"}, ""},
		{"vconn", []string{client, server}, server},
		{"link", []string{module + "/vconn", server}, server},
		{"agent", []string{server + "/internal/x"}, server + "/internal/x"},
		{"socks", []string{module + "/agent", server}, server},
		{"perf", []string{server}, server},
		{"", []string{server}, ""},
		{"cli", []string{server}, ""},
		{"cmd/gridlink", []string{server}, ""},
		{"internal/lab/matrix", []string{server}, ""},
		{"hub/hubserver", []string{client}, ""},
		{"hub", []string{module + "/wire"}, ""},
		{"vconn", []string{module + "/hub/hubserverx"}, ""},
	} {
		if got := hubServerDep(tc.rel, tc.deps); got != tc.want {
			t.Errorf("hubServerDep(%q, %v) = %q, want %q", tc.rel, tc.deps, got, tc.want)
		}
	}
}

// The hub server is in the hub layer: below vconn, above the transports.
func TestHubServerLayer(t *testing.T) {
	if _, got, ok := layerOf(hubServer); !ok || got != "hub" {
		t.Errorf("layerOf(%q) = %q, %v; want the hub layer", hubServer, got, ok)
	}
	if nodeSide(hubServer) {
		t.Errorf("%s counted as node-side", hubServer)
	}
}
