package gridlink

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vip"
	"github.com/gridlink/gridlink/vip/dns"
)

// goResolver is Go's resolver asking only server.
func goResolver(server netip.AddrPort) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server.String())
	}}
}

// A node's name server answers NODE.grid with the virtual addresses the
// hubs give that node, to a real resolver client; a node without virtual
// addresses, or no node, is not found; names outside the zone are
// refused; reverse names give the node's name.
func TestServeNames(t *testing.T) {
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
	cfg.Name = "Other-1"
	other, err := StartAttached(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	v4, v6, err := vip.Addrs(vip.DefaultPrefix4, vip.DefaultPrefix6, other.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.n.Session().ClaimAddrs(ctx, v4, v6); err != nil {
		t.Fatal(err)
	}
	ns, err := asker.ServeNames("127.0.0.1:0", NameOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if ns.Zone() != "grid" || !ns.Addr().Addr().Is4() || !ns.Addr().Addr().IsLoopback() || ns.Addr().Port() == 0 {
		t.Errorf("serving %q on %v", ns.Zone(), ns.Addr())
	}
	r := goResolver(ns.Addr())
	want := []netip.Addr{v4, v6}
	slices.SortFunc(want, netip.Addr.Compare)
	for _, name := range []string{"other-1.grid", "OTHER-1.GRID.", other.ID().String() + ".grid"} {
		got, err := r.LookupNetIP(ctx, "ip", name)
		slices.SortFunc(got, netip.Addr.Compare)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v %v, want %v", name, got, err, want)
		}
	}
	var de *net.DNSError
	for _, name := range []string{"asker.grid", "nobody.grid", "127.0.0.1.grid"} {
		if _, err := r.LookupNetIP(ctx, "ip", name); !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: %v, want not found", name, err)
		}
	}
	if _, err := r.LookupNetIP(ctx, "ip", "example.org"); !errors.As(err, &de) || de.IsNotFound {
		t.Errorf("example.org: %v, want refused", err)
	}
	if names, err := r.LookupAddr(ctx, v6.String()); err != nil || !slices.Equal(names, []string{"other-1.grid."}) {
		t.Errorf("reverse of %s: %v %v", v6, names, err)
	}
	if _, err := asker.LookupVirtual(ctx, "nobody"); !errors.Is(err, dns.ErrNotFound) {
		t.Errorf("LookupVirtual of nobody: %v", err)
	}
	if st := ns.Stats(); st.Lookups == 0 || st.NXDomain == 0 || st.Refused == 0 {
		t.Errorf("stats %+v", st)
	}
	if err := ns.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// resolv.conf: the name server goes first, the file's lines stay after
// it, once however often it is configured (a node that crashed left its
// lines); Close takes gridlink's lines out again, puts a symlink back, and
// leaves a file someone else rewrote since as it is.
func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	orig := "# from DHCP\nnameserver 192.0.2.1\nsearch example.org\n"
	os.WriteFile(path, []byte(orig), 0o644)
	server := netip.MustParseAddrPort("127.0.0.153:53")
	ctx := context.Background()
	o := ResolverOptions{Server: server, ResolvConf: path} // ResolverAuto: no link, no namespace
	var h *HostResolver
	for range 2 {
		var err error
		if h, err = ConfigureResolver(ctx, o); err != nil {
			t.Fatal(err)
		}
		if h.Method() != ResolverResolvConf {
			t.Errorf("without a link or a namespace: method %q", h.Method())
		}
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	if !strings.HasPrefix(lines[0], "# gridlink:") || lines[1] != "nameserver 127.0.0.153" || strings.Join(lines[2:], "\n") != orig ||
		strings.Count(string(b), "127.0.0.153") != 1 {
		t.Errorf("configured file:\n%s", b)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != orig {
		t.Errorf("after Close:\n%s\nwant\n%s", b, orig)
	}

	// rewritten meanwhile: theirs stays
	h, _ = ConfigureResolver(ctx, o)
	os.WriteFile(path, []byte("nameserver 198.51.100.1\n"), 0o644)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "nameserver 198.51.100.1\n" {
		t.Errorf("a file rewritten by another was changed: %s", b)
	}

	// a symlink (systemd-resolved's stub file): the target untouched,
	// the link back after
	target := filepath.Join(dir, "stub-resolv.conf")
	os.WriteFile(target, []byte("nameserver 127.0.0.53\n"), 0o644)
	link := filepath.Join(dir, "linked.conf")
	os.Symlink(target, link)
	o.ResolvConf = link
	h, err := ConfigureResolver(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(link); !strings.Contains(string(b), "nameserver 127.0.0.153\nnameserver 127.0.0.53\n") {
		t.Errorf("configured over a link:\n%s", b)
	}
	if b, _ := os.ReadFile(target); string(b) != "nameserver 127.0.0.53\n" {
		t.Errorf("the link's target was written: %s", b)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if to, err := os.Readlink(link); err != nil || to != target {
		t.Errorf("after Close the link is %q, %v", to, err)
	}

	// only port 53 can be named
	_, err = ConfigureResolver(ctx, ResolverOptions{Server: netip.MustParseAddrPort("127.0.0.1:5353"), Method: ResolverResolvConf, ResolvConf: path})
	var re *ResolverError
	if !errors.As(err, &re) || !errors.Is(err, ErrResolver) || re.Method != ResolverResolvConf {
		t.Errorf("port 5353: %v", err)
	}
}

// A lab namespace: /etc/netns/NS/resolv.conf (here under a test
// directory) names the name server alone, and goes on Close with the
// directory made for it.
func TestResolvConfNetns(t *testing.T) {
	dir := t.TempDir()
	server := netip.MustParseAddrPort("127.0.0.153:53")
	dir = filepath.Join(dir, "netns")
	h, err := ConfigureResolver(context.Background(), ResolverOptions{Server: server, Namespace: "lab-a", NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if h.Method() != ResolverNetns {
		t.Errorf("method %q", h.Method())
	}
	b, _ := os.ReadFile(filepath.Join(dir, "lab-a", "resolv.conf"))
	if strings.Count(string(b), "nameserver") != 1 || !strings.Contains(string(b), "nameserver 127.0.0.153\n") {
		t.Errorf("namespace file:\n%s", b)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directories made for the file are left: %v", err)
	}
	// a namespace that has a resolv.conf of its own (a lab's): the name
	// server alone while the node runs, the file as it was after
	lab := filepath.Join(dir, "lab-b", "resolv.conf")
	const labText = "# gridlab: no name server\noptions timeout:1 attempts:1\n"
	if err := os.MkdirAll(filepath.Dir(lab), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lab, []byte(labText), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err = ConfigureResolver(context.Background(), ResolverOptions{Server: server, Namespace: "lab-b", NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(lab); strings.Contains(string(b), "options") || !strings.Contains(string(b), "nameserver 127.0.0.153\n") {
		t.Errorf("the lab's namespace file while the node runs:\n%s", b)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(lab); string(b) != labText {
		t.Errorf("the lab's namespace file after Close:\n%s\nwant it as it was:\n%s", b, labText)
	}
	for _, bad := range []string{"../x", "a/b", ".."} {
		if _, err := ConfigureResolver(context.Background(), ResolverOptions{Server: server, Namespace: bad, NetnsDir: dir}); !errors.Is(err, ErrResolver) {
			t.Errorf("namespace %q: %v", bad, err)
		}
	}
}

// systemd-resolved: the zone routed to the link's server only.
func TestResolvedCommands(t *testing.T) {
	got := resolvedCommands("gl0", netip.MustParseAddrPort("100.96.0.5:53"), "grid")
	want := [][]string{{"dns", "gl0", "100.96.0.5"}, {"domain", "gl0", "~grid"}, {"default-route", "gl0", "false"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("got %v", got)
	}
	got = resolvedCommands("gl0", netip.MustParseAddrPort("[fd67:726c::5]:5353"), "grid")
	if got[0][2] != "[fd67:726c::5]:5353" {
		t.Errorf("with a port: %v", got[0])
	}
}
