package gridlink

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/vip"
	"github.com/gridlink/gridlink/vip/dns"
)

// Names of the virtual IP network (issue 19): NODE.grid resolves to the
// node's virtual addresses for unmodified programs. A node serves the
// zone (ServeNames: package vip/dns, its lookups through the node's hub
// session, which answers a lookup by name with the addresses the hubs'
// directory gives the node), and the host's resolver is pointed at it
// (ConfigureResolver, docs/vip.md "Names").

// DefaultNameServer is where a node's name server listens unless told
// otherwise: a loopback address of its own (not systemd-resolved's
// 127.0.0.53 or 127.0.0.54) on port 53, the only port a resolv.conf can
// name.
const DefaultNameServer = "127.0.0.153:53"

// NameOptions configure a node's name server; the zero value serves
// "grid" with PTR answers for the default virtual prefixes.
type NameOptions struct {
	Zone     string         // default dns.DefaultZone ("grid")
	Prefixes []netip.Prefix // reverse names answered (default vip.DefaultPrefix4, vip.DefaultPrefix6)
}

// NameStats are a name server's counters.
type NameStats = dns.Stats

// NameServer answers the virtual network's names on a node: made by
// ServeNames, stopped by Close.
type NameServer struct {
	srv    *dns.Server
	addr   netip.AddrPort
	cancel context.CancelFunc
	done   chan error
}

// ServeNames serves the zone on addr (UDP and TCP; DefaultNameServer if
// empty; port 0: a free one): A and AAAA for NAME.zone from the hubs
// (LookupVirtual), PTR for the prefixes' reverse names, NXDOMAIN for a
// name no node on the virtual network has, REFUSED for any name outside
// the zone.
func (n *Node) ServeNames(addr string, o NameOptions) (*NameServer, error) {
	if addr == "" {
		addr = DefaultNameServer
	}
	if len(o.Prefixes) == 0 {
		o.Prefixes = []netip.Prefix{vip.DefaultPrefix4, vip.DefaultPrefix6}
	}
	srv, err := dns.New(dns.Config{Zone: o.Zone, Lookup: n.LookupVirtual, LookupAddr: n.lookupVirtualName, Prefixes: o.Prefixes})
	if err != nil {
		return nil, err
	}
	pc, l, err := dns.Listen(addr)
	if err != nil {
		srv.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	s := &NameServer{srv: srv, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, pc, l) }()
	return s, nil
}

// Addr is where the name server listens (UDP and TCP).
func (s *NameServer) Addr() netip.AddrPort { return s.addr }

// Zone is the zone it serves, without its final dot.
func (s *NameServer) Zone() string { return s.srv.Zone() }

// Stats are its counters so far.
func (s *NameServer) Stats() NameStats { return s.srv.Stats() }

// Close stops it.
func (s *NameServer) Close() error {
	s.cancel()
	err := <-s.done
	s.srv.Close()
	s.done <- err // a second Close returns the same
	return err
}

// LookupVirtual is the virtual addresses of the node named name (any
// case) or with ID name, as the hubs' directory gives them. A name no
// node attached to a hub has, or whose node holds no virtual address, is
// an error wrapping dns.ErrNotFound (and, for the former, hub.ErrNotFound).
func (n *Node) LookupVirtual(ctx context.Context, name string) ([]netip.Addr, error) {
	if _, err := netip.ParseAddr(name); err == nil {
		// the hubs match an IP address against nodes' real addresses;
		// NAME.grid is never one of those.
		return nil, fmt.Errorf("gridlink: %q is an IP address, not a node name: %w", name, dns.ErrNotFound)
	}
	s := n.n.Session()
	if s == nil {
		return nil, fmt.Errorf("gridlink: cannot look up %q: this node has no hub", name)
	}
	ms, err := s.Lookup(ctx, name)
	if errors.Is(err, hub.ErrNotFound) {
		return nil, errors.Join(err, dns.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, m := range ms {
		for _, a := range m.Virtual {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gridlink: node %q holds no virtual address: %w", name, dns.ErrNotFound)
	}
	return out, nil
}

// lookupVirtualName is the name (lower case) of the node holding virtual
// address a, for PTR answers.
func (n *Node) lookupVirtualName(ctx context.Context, a netip.Addr) (string, error) {
	s := n.n.Session()
	if s == nil {
		return "", fmt.Errorf("gridlink: cannot look up %s: this node has no hub", a)
	}
	m, err := s.LookupAddr(ctx, a)
	if errors.Is(err, hub.ErrNotFound) {
		return "", errors.Join(err, dns.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return strings.ToLower(m.Name), nil
}

// ResolverMethod is how the host's resolver is pointed at a name server.
type ResolverMethod string

// The methods (docs/vip.md "Names" says which to use where).
const (
	// ResolverAuto picks ResolverNetns when a Namespace is given, else
	// ResolverResolved when systemd-resolved runs and a Link is given,
	// else ResolverResolvConf.
	ResolverAuto ResolverMethod = ""
	// ResolverResolved makes the name server the DNS server of the
	// Link (the node's TUN device) for the zone only: resolvectl dns,
	// domain ~ZONE, default-route false; undone with resolvectl revert.
	ResolverResolved ResolverMethod = "systemd-resolved"
	// ResolverResolvConf puts the name server first in ResolvConf: glibc
	// asks it first and moves on to the next server when it answers
	// REFUSED (every name outside the zone). Undone on Close.
	ResolverResolvConf ResolverMethod = "resolv.conf"
	// ResolverNetns writes /etc/netns/NAMESPACE/resolv.conf, which
	// `ip netns exec NAMESPACE` mounts over /etc/resolv.conf, with the
	// name server alone. Removed on Close, or, if there was one before
	// (a lab's: internal/lab's netnsetc.go), put back as it was.
	ResolverNetns ResolverMethod = "netns"
)

// ResolverOptions say which name server the host's resolver should ask
// for which zone, and how.
type ResolverOptions struct {
	Server     netip.AddrPort // the name server (port 53 for resolv.conf and netns)
	Zone       string         // default dns.DefaultZone
	Method     ResolverMethod
	Link       string // ResolverResolved: the interface the zone is routed to
	Namespace  string // ResolverNetns: the named network namespace
	ResolvConf string // ResolverResolvConf: the file (default /etc/resolv.conf)
	NetnsDir   string // ResolverNetns: where namespaces' files are (default /etc/netns)
}

// ErrResolver is wrapped by every ResolverError.
var ErrResolver = errors.New("cannot configure the host's resolver")

// ResolverError is a resolver configuration that failed: the method, what
// it did (Op) and on what (Path: a file or a link), and why.
type ResolverError struct {
	Method ResolverMethod
	Op     string
	Path   string
	Err    error
}

func (e *ResolverError) Error() string {
	return fmt.Sprintf("gridlink: %v (%s): %s %s: %v", ErrResolver, e.Method, e.Op, e.Path, e.Err)
}

func (e *ResolverError) Unwrap() []error { return []error{ErrResolver, e.Err} }

// HostResolver is the host's resolver pointed at a name server; Close
// undoes it.
type HostResolver struct {
	method  ResolverMethod
	link    string
	path    string   // the resolv.conf written
	symlink string   // its symlink target before, if it was one
	created bool     // the file did not exist before (netns)
	prev    []byte   // the file as it was before, to put back (netns)
	dirs    []string // the directories made for it (netns), innermost first
}

// removeDirs removes the directories made for the file, if empty.
func (h *HostResolver) removeDirs() {
	for _, d := range h.dirs {
		os.Remove(d) // fails, and stays, if not empty
	}
}

// resolvedRunning reports whether systemd-resolved runs here and
// resolvectl can talk to it.
func resolvedRunning() bool {
	if _, err := os.Stat("/run/systemd/resolve/io.systemd.Resolve"); err != nil {
		return false
	}
	_, err := exec.LookPath("resolvectl")
	return err == nil
}

// ConfigureResolver points the host's resolver at o.Server for o.Zone.
func ConfigureResolver(ctx context.Context, o ResolverOptions) (*HostResolver, error) {
	if o.Zone == "" {
		o.Zone = dns.DefaultZone
	}
	o.Zone = strings.Trim(strings.ToLower(o.Zone), ".")
	if o.Method == ResolverAuto {
		switch {
		case o.Namespace != "":
			o.Method = ResolverNetns
		case o.Link != "" && resolvedRunning():
			o.Method = ResolverResolved
		default:
			o.Method = ResolverResolvConf
		}
	}
	fail := func(op, path string, err error) (*HostResolver, error) {
		return nil, &ResolverError{Method: o.Method, Op: op, Path: path, Err: err}
	}
	if !o.Server.IsValid() {
		return fail("check", "server", errors.New("no name server address"))
	}
	switch o.Method {
	case ResolverResolved:
		for _, args := range resolvedCommands(o.Link, o.Server, o.Zone) {
			if out, err := exec.CommandContext(ctx, "resolvectl", args...).CombinedOutput(); err != nil {
				exec.Command("resolvectl", "revert", o.Link).Run()
				return fail("resolvectl "+strings.Join(args, " "), o.Link, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
			}
		}
		return &HostResolver{method: o.Method, link: o.Link}, nil
	case ResolverResolvConf, ResolverNetns:
		if o.Server.Port() != 53 {
			return fail("check", "server", fmt.Errorf("a resolv.conf names servers on port 53 only, not %d", o.Server.Port()))
		}
		h := &HostResolver{method: o.Method, path: o.ResolvConf}
		if o.Method == ResolverNetns {
			if o.Namespace == "" || strings.ContainsAny(o.Namespace, "/\x00") || o.Namespace == "." || o.Namespace == ".." {
				return fail("check", "namespace", fmt.Errorf("bad namespace name %q", o.Namespace))
			}
			dir := o.NetnsDir
			if dir == "" {
				dir = "/etc/netns"
			}
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				h.dirs = append(h.dirs, dir)
			}
			dir = filepath.Join(dir, o.Namespace)
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return fail("make", dir, err)
				}
				h.dirs = append([]string{dir}, h.dirs...)
			}
			h.path = filepath.Join(dir, "resolv.conf")
		}
		if h.path == "" {
			h.path = "/etc/resolv.conf"
		}
		if err := h.write(o.Server.Addr(), o.Zone); err != nil {
			h.removeDirs()
			return fail("write", h.path, err)
		}
		return h, nil
	}
	return fail("check", "method", fmt.Errorf("unknown method %q", o.Method))
}

// resolvedCommands are the resolvectl commands that route zone to server
// on link: its DNS server, the routing-only domain ~zone, and no default
// route (other names never go to it).
func resolvedCommands(link string, server netip.AddrPort, zone string) [][]string {
	addr := server.Addr().String()
	if server.Port() != 53 {
		addr = server.String() // ADDR:PORT, [ADDR]:PORT for IPv6 (systemd 246 or later)
	}
	return [][]string{{"dns", link, addr}, {"domain", link, "~" + zone}, {"default-route", link, "false"}}
}

// resolvMark is the comment line gridlink writes before its nameserver
// line in a resolv.conf; the line after it is that nameserver.
const resolvMark = "# gridlink: the virtual network's names (NODE.%s) through the node's name server; removed when the node stops"

// write puts a nameserver line for server first in h.path, after the
// marker, keeping the file's other lines (but an earlier gridlink's).
func (h *HostResolver) write(server netip.Addr, zone string) error {
	var old []byte
	fi, err := os.Lstat(h.path)
	switch {
	case err == nil && fi.Mode()&os.ModeSymlink != 0:
		if h.symlink, err = os.Readlink(h.path); err != nil {
			return err
		}
		old, _ = os.ReadFile(h.path) // a dangling link reads as empty
	case err == nil:
		if old, err = os.ReadFile(h.path); err != nil {
			return err
		}
		h.prev = old
	case os.IsNotExist(err):
		h.created = true
	default:
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, resolvMark+"\nnameserver %s\n", zone, server)
	if h.method != ResolverNetns {
		b.Write(stripOurs(old))
	}
	return replaceFile(h.path, b.Bytes())
}

// stripOurs is a resolv.conf without gridlink's marker lines and the
// nameserver line after each.
func stripOurs(b []byte) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	skip := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# gridlink: the virtual network's names"):
			skip = true
			continue
		case skip && strings.HasPrefix(strings.TrimSpace(line), "nameserver"):
			skip = false
			continue
		}
		skip = false
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}

// replaceFile writes b to path through a temporary file renamed over it
// (a symlink at path is replaced, its target left alone).
func replaceFile(path string, b []byte) error {
	tmp := path + ".gridlink-tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Method is how the resolver was configured.
func (h *HostResolver) Method() ResolverMethod { return h.method }

// Close undoes the configuration: resolvectl revert on the link; for a
// resolv.conf, gridlink's lines taken out of the file as it is now (what
// others wrote since stays), a symlink put back if the file was one and is
// still gridlink's, a file gridlink made removed.
func (h *HostResolver) Close() error {
	fail := func(op, path string, err error) error {
		return &ResolverError{Method: h.method, Op: op, Path: path, Err: err}
	}
	if h.method == ResolverResolved {
		if out, err := exec.Command("resolvectl", "revert", h.link).CombinedOutput(); err != nil {
			return fail("resolvectl revert", h.link, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
		}
		return nil
	}
	cur, err := os.ReadFile(h.path)
	if os.IsNotExist(err) {
		return nil // someone removed it: nothing of ours left
	}
	if err != nil {
		return fail("read", h.path, err)
	}
	rest := stripOurs(cur)
	fi, _ := os.Lstat(h.path)
	ours := fi != nil && fi.Mode().IsRegular() && !bytes.Equal(rest, cur)
	switch {
	case !ours:
		// rewritten by someone else since (a DHCP client): theirs now
	case h.created && len(bytes.TrimSpace(rest)) == 0:
		if err := os.Remove(h.path); err != nil {
			return fail("remove", h.path, err)
		}
		h.removeDirs()
	case h.method == ResolverNetns && h.prev != nil:
		// the namespace's own file before (a lab's), as it was
		if err := replaceFile(h.path, h.prev); err != nil {
			return fail("restore", h.path, err)
		}
	case h.symlink != "":
		// it was a link (to systemd-resolved's file, say): the link again
		tmp := h.path + ".gridlink-tmp"
		os.Remove(tmp)
		if err := os.Symlink(h.symlink, tmp); err != nil {
			return fail("restore the symlink", h.path, err)
		}
		if err := os.Rename(tmp, h.path); err != nil {
			os.Remove(tmp)
			return fail("restore the symlink", h.path, err)
		}
	default:
		if err := replaceFile(h.path, rest); err != nil {
			return fail("restore", h.path, err)
		}
	}
	return nil
}
