// Package archtest enforces the module's layering: packages depend in one
// direction only, and the product never depends on the lab.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gridlink/gridlink"

// layers, lowest first. A package may import packages of lower layers only
// (and its own subpackages). Paths are relative to the module; a path
// covers its subpackages.
var layers = [][]string{
	{"identity", "peercred"}, // peercred: which local account is at a connection's other end (the kernel's word)
	{"status"},               // the JSON schema of what agents and hubs report
	{"agent/control"},        // the agent's control API as its callers see it: schema, sockets, client
	{"pki"},
	{"wire"},
	{"direct", "nat", "portmap", "tun", "vip/dns"}, // tun: the TUN device seam of the virtual IP network; vip/dns: its names (needs only a lookup function)
	{"hub"},
	{"vconn"},
	{"link"},
	{"agent"}, // the node agent: holds a node, serves the local control API (agent/control has its own layer)
	{"xfer", "socks", "forward", "vip", "exec", "perf", "metrics"}, // vip: the virtual IP network; exec: the job launcher; metrics: Prometheus collectors over the status schema
	{""},          // the top-level API package gridlink
	{"dashboard"}, // the web view, on the API; the command line starts it
	{"cli"},
	{"internal/lab"}, // the emulated grid: may drive the product, never the reverse
	{"cmd", "internal"},
}

func layerOf(rel string) (int, string, bool) {
	best, bestLen, name := -1, -1, ""
	for i, l := range layers {
		for _, p := range l {
			if (rel == p || strings.HasPrefix(rel, p+"/") || p == "") && len(p) > bestLen {
				if p == "" && rel != "" {
					continue
				}
				best, bestLen, name = i, len(p), p
			}
		}
	}
	return best, name, best >= 0
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		from, fromName, ok := layerOf(pkg)
		if !ok {
			t.Errorf("package %s has no layer: add it to the layers in internal/archtest", fields[0])
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			to, toName, ok := layerOf(rel)
			if !ok {
				continue // reported on its own line
			}
			if toName == "internal/lab" && fromName != "internal/lab" && pkg != "cmd/gridlab" {
				t.Errorf("%s imports the lab package %s: only the lab and cmd/gridlab may", fields[0], imp)
			}
			if to > from || (to == from && toName != fromName) {
				t.Errorf("%s (layer %q) imports %s (layer %q): dependencies must point down %v", fields[0], fromName, imp, toName, layers)
			}
		}
	}
}

// wireguardTun is the library under package tun. The rest of the module
// reaches TUN devices through that seam only.
const wireguardTun = "golang.zx2c4.com/wireguard"

func TestTUNThroughSeam(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if _, name, _ := layerOf(pkg); name == "tun" {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == wireguardTun || strings.HasPrefix(imp, wireguardTun+"/") {
				t.Errorf("%s imports %s: TUN devices go through package tun", fields[0], imp)
			}
		}
	}
}

func TestLayerOf(t *testing.T) {
	for rel, want := range map[string]string{"": "", "internal/lab/matrix": "internal/lab", "internal/archtest": "internal", "cmd/gridlab": "cmd", "hub": "hub", "vconn/splice": "vconn", "tun": "tun", "tun/tuntest": "tun", "vip": "vip", "exec": "exec", "dashboard": "dashboard", "metrics": "metrics",
		"agent": "agent", "agent/control": "agent/control", "status": "status", "peercred/peercredtest": "peercred"} {
		if _, got, ok := layerOf(rel); !ok || got != want {
			t.Errorf("layerOf(%q) = %q, %v; want %q", rel, got, ok, want)
		}
	}
	if _, _, ok := layerOf("mystery"); ok {
		t.Errorf("unknown package got a layer")
	}
}

// overlay are the packages that make a node: a program that only talks to
// an agent (or reads a report) needs none of them.
var overlay = []string{"hub", "vconn", "link", "direct", "nat", "portmap"}

// deps are the module's packages that pkg's non-test code depends on,
// directly or not, relative to the module.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var rel []string
	for _, p := range strings.Fields(string(out)) {
		if r, ok := strings.CutPrefix(p, module+"/"); ok {
			rel = append(rel, r)
		}
	}
	return rel
}

// within says whether rel is one of pkgs or under one of them.
func within(rel string, pkgs []string) bool {
	for _, p := range pkgs {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// The agent's client and the status schema link none of the overlay: the
// CLI's agent commands, socks, forward and (later) the dashboard talk to
// an agent without carrying a node of their own. socks and forward use
// the agent only through agent/control, not through the agent's server.
func TestNoOverlayInClients(t *testing.T) {
	for _, pkg := range []string{"status", "agent/control", "socks", "forward"} {
		for _, d := range deps(t, pkg) {
			if within(d, overlay) || d == "agent" {
				t.Errorf("%s depends on %s: it may reach an agent only through agent/control and the status schema", pkg, d)
			}
		}
	}
}

// prometheusClient is the library under package metrics. The rest of the
// module counts with its own atomics and reports in package status's
// shapes; only metrics speaks Prometheus.
const prometheusClient = "github.com/prometheus/client_golang"

func TestPrometheusThroughMetrics(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if _, name, _ := layerOf(pkg); name == "metrics" {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == prometheusClient || strings.HasPrefix(imp, prometheusClient+"/") {
				t.Errorf("%s imports %s: Prometheus goes through package metrics", fields[0], imp)
			}
		}
	}
}
