package gridlink

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vip"
)

// A --vip node's names: its name server answers NODE.ZONE with the
// addresses the hubs give that node; the host's resolver is left alone
// with ResolverNone, or, in a named namespace, pointed at the server by
// /etc/netns/NS/resolv.conf (here under a test directory), which goes
// when the node stops.
func TestVIPNamesStart(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}
	cfg.Name = "asker"
	asker, err := StartAttached(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer asker.Close()
	cfg.Name = "other"
	other, err := StartAttached(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	v4, v6, _ := vip.Addrs(vip.DefaultPrefix4, vip.DefaultPrefix6, other.ID(), 0)
	if err := other.n.Session().ClaimAddrs(ctx, v4, v6); err != nil {
		t.Fatal(err)
	}
	prefixes := []netip.Prefix{vip.DefaultPrefix4, vip.DefaultPrefix6}

	v, err := startNames(ctx, asker, VIPNames{Addr: "127.0.0.1:0", Zone: "grid.example.org", Resolver: ResolverNone}, prefixes, "gl9")
	if err != nil {
		t.Fatal(err)
	}
	if v.method() != ResolverNone || v.srv.Zone() != "grid.example.org" {
		t.Errorf("method %q zone %q", v.method(), v.srv.Zone())
	}
	got, err := goResolver(v.srv.Addr()).LookupNetIP(ctx, "ip4", "other.grid.example.org")
	if err != nil || !slices.Equal(got, []netip.Addr{v4}) {
		t.Errorf("other.grid.example.org: %v %v, want %v", got, err, v4)
	}
	if err := v.close(); err != nil {
		t.Fatal(err)
	}

	// the netns method, on port 53 as a resolv.conf needs
	dir := filepath.Join(t.TempDir(), "netns")
	v, err = startNames(ctx, asker, VIPNames{Addr: "127.0.0.157:53", Namespace: "lab-x", NetnsDir: dir}, prefixes, "gl9")
	if errors.Is(err, syscall.EACCES) {
		t.Skip("port 53 needs root")
	}
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lab-x", "resolv.conf")
	b, _ := os.ReadFile(file)
	if v.method() != ResolverNetns || !strings.Contains(string(b), "nameserver 127.0.0.157\n") {
		t.Errorf("method %q, %s:\n%s", v.method(), file, b)
	}
	if got, err := goResolver(v.srv.Addr()).LookupNetIP(ctx, "ip6", "other.grid"); err != nil || !slices.Equal(got, []netip.Addr{v6}) {
		t.Errorf("other.grid: %v %v, want %v", got, err, v6)
	}
	if err := v.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the namespace's resolver file is left after close: %v", err)
	}

	// a resolver that cannot be configured: the server does not stay
	_, err = startNames(ctx, asker, VIPNames{Addr: "127.0.0.157:5353", Resolver: ResolverNetns, Namespace: "lab-x", NetnsDir: dir}, prefixes, "gl9")
	if !errors.Is(err, ErrResolver) {
		t.Fatalf("a resolv.conf for port 5353: %v, want ErrResolver", err)
	}
	v, err = startNames(ctx, asker, VIPNames{Addr: "127.0.0.157:5353", Resolver: ResolverNone}, prefixes, "")
	if err != nil {
		t.Fatalf("the address after a failed start: %v", err)
	}
	v.close()
}

// currentNetns names the `ip netns` namespace this process runs in: the
// entry of the directory that is the same namespace (here a symlink to
// it), none otherwise.
func TestCurrentNetns(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ns := currentNetns(dir); ns != "" {
		t.Errorf("currentNetns = %q, want none", ns)
	}
	if err := os.Symlink("/proc/self/ns/net", filepath.Join(dir, "mine")); err != nil {
		t.Fatal(err)
	}
	if ns := currentNetns(dir); ns != "mine" {
		t.Errorf("currentNetns = %q, want mine", ns)
	}
	if ns := currentNetns(filepath.Join(dir, "none")); ns != "" {
		t.Errorf("currentNetns of no directory = %q", ns)
	}
}
