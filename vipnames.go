package gridlink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vip"
)

// The names and access rules of a node agent's virtual network: its
// name server (ServeNames) and the host's resolver pointed at it
// (ConfigureResolver), both undone when the node stops; the rules as
// flags and files give them (VIPRules).

// VIPRules are a node's access rules on the virtual network: who may
// reach which ports of it, enforced on every packet a peer sends it
// (package vip's Rules: the text form "allow WHO WHAT...", WHO one of *,
// group:NAME, user:NAME, node:NAME; WHAT one of any, icmp, tcp, udp,
// tcp/PORTS, udp/PORTS). The zero value lets every member reach
// everything. Set adds entries (a flag given several times).
type VIPRules = vip.Rules

// ParseVIPRules reads rules in the text form; a bad entry is a
// *vip.RuleError naming it (errors.Is(err, vip.ErrBadRule)).
func ParseVIPRules(text string) (VIPRules, error) { return vip.ParseRules(text) }

// ErrBadVIPRule matches every refusal of a rule's text.
var ErrBadVIPRule = vip.ErrBadRule

// ReadVIPRules reads a rules file (the text form, '#' comments).
func ReadVIPRules(path string) (VIPRules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return VIPRules{}, err
	}
	r, err := vip.ParseRules(string(b))
	if err != nil {
		return VIPRules{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ResolverNone leaves the host's resolver alone: the node serves names,
// and the host is pointed at them by hand (docs/vip.md "Per setup").
const ResolverNone ResolverMethod = "none"

// VIPNames configures the names of a node's virtual network
// (docs/vip.md "Names"). The zero value serves NODE.grid on
// DefaultNameServer and points the host's resolver at it.
type VIPNames struct {
	// Off serves no names and leaves the host's resolver alone.
	Off bool
	// Addr is where the name server listens (UDP and TCP); empty:
	// DefaultNameServer. A resolv.conf names port 53 only.
	Addr string
	// Zone is the names' zone; empty: "grid".
	Zone string
	// Resolver is how the host's resolver is pointed at the name
	// server. ResolverAuto: ResolverNetns in a named network namespace
	// (a process of `ip netns exec NS`: /etc/netns/NS/resolv.conf, which
	// the programs `ip netns exec NS` starts from then on read), else
	// systemd-resolved on the node's device where it runs, else
	// /etc/resolv.conf. ResolverNone: left alone.
	Resolver ResolverMethod
	// Namespace, ResolvConf and NetnsDir are ConfigureResolver's; empty
	// Namespace: the named namespace this process runs in (for the
	// netns method), if any.
	Namespace, ResolvConf, NetnsDir string
}

// vipNames is a node's running name server and the host's resolver
// pointed at it.
type vipNames struct {
	srv *NameServer
	res *HostResolver // nil: ResolverNone
}

// startNames serves the virtual network's names for node n (reverse
// names for the prefixes) and points the host's resolver at them, the
// zone routed to link where that is how (systemd-resolved).
func startNames(ctx context.Context, n *Node, o VIPNames, prefixes []netip.Prefix, link string) (*vipNames, error) {
	srv, err := n.ServeNames(o.Addr, NameOptions{Zone: o.Zone, Prefixes: prefixes})
	if err != nil {
		return nil, fmt.Errorf("virtual network: name server on %s: %w", cmp.Or(o.Addr, DefaultNameServer), err)
	}
	v := &vipNames{srv: srv}
	if o.Resolver == ResolverNone {
		return v, nil
	}
	ns := o.Namespace
	if ns == "" && (o.Resolver == ResolverAuto || o.Resolver == ResolverNetns) {
		ns = currentNetns(netnsRunDir)
	}
	v.res, err = ConfigureResolver(ctx, ResolverOptions{Server: srv.Addr(), Zone: o.Zone, Method: o.Resolver,
		Link: link, Namespace: ns, ResolvConf: o.ResolvConf, NetnsDir: o.NetnsDir})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("virtual network: names: %w", err)
	}
	return v, nil
}

// method is how the host's resolver was pointed at the name server.
func (v *vipNames) method() ResolverMethod {
	if v.res == nil {
		return ResolverNone
	}
	return v.res.Method()
}

// close undoes the resolver's configuration and stops the name server.
func (v *vipNames) close() error {
	var err error
	if v.res != nil {
		err = v.res.Close()
	}
	return errors.Join(err, v.srv.Close())
}

// netnsRunDir is where `ip netns` keeps its named network namespaces.
const netnsRunDir = "/run/netns"

// currentNetns is the name of the named network namespace (an entry of
// dir, as `ip netns add` makes them) this process runs in, or "" when
// it runs in none of them: what `ip netns identify` says.
func currentNetns(dir string) string {
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && os.SameFile(self, fi) {
			return e.Name()
		}
	}
	return ""
}

// VIPStatus is the virtual network's part of the agent's status (as
// `gridlink status` shows it); nil without VIP.On.
func (a *Agent) VIPStatus() *status.VIP {
	if a.vip == nil {
		return nil
	}
	return a.vip.status()
}
