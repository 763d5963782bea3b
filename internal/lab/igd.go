package lab

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// An igd=on site's gateway runs miniupnpd (Debian's miniupnpd-nftables: the
// daemon alone, without the miniupnpd package's system service), which
// answers UPnP IGD and NAT-PMP on the site's nat nets and adds its port
// forwards to the nftables table IGDTable that Plan makes for it.
//
// miniupnpd refuses to map ports when its external address is a reserved
// one, as every lab address is, unless a STUN server tells it that its
// address is public and unfiltered. So while miniupnpd starts, gridlab
// answers STUN Binding requests itself, inside the gateway on its WAN
// address (the requests never leave the gateway), with the address they
// came from: the WAN address.
const (
	IGDTable    = "gridlab-igd"
	IGDHTTPPort = 5000 // miniupnpd's HTTP (descriptions and SOAP) port
	igdSTUNPort = 3478
	// The chains miniupnpd adds its rules to, jumped to from IGDTable's
	// base chains.
	igdForwardChain     = "miniupnpd"
	igdNATChain         = "prerouting_miniupnpd"
	igdPostroutingChain = "postrouting_miniupnpd"
)

// igdRuleset returns the nftables table in which the site's miniupnpd
// adds its rules: DNAT of mapped ports in prerouting (alongside the site's
// gridlab-nat table, whose forward lines it must not shadow), accept rules
// in forward (the gridlab table already accepts DNATed inbound connections)
// and postrouting (unused for plain mappings).
func igdRuleset(s *topology.Site) []string {
	return []string{
		"table inet " + IGDTable + " {",
		"  chain forward {",
		"    type filter hook forward priority filter; policy accept;",
		"    jump " + igdForwardChain,
		"  }",
		"  chain " + igdForwardChain + " {",
		"  }",
		"  chain prerouting {",
		"    type nat hook prerouting priority dstnat; policy accept;",
		fmt.Sprintf("    iifname %q jump %s", WANDev, igdNATChain),
		"  }",
		"  chain " + igdNATChain + " {",
		"  }",
		"  chain postrouting {",
		"    type nat hook postrouting priority srcnat; policy accept;",
		"    jump " + igdPostroutingChain,
		"  }",
		"  chain " + igdPostroutingChain + " {",
		"  }",
		"}",
	}
}

// IGDLogPath is the log of site s's miniupnpd.
func IGDLogPath(s *topology.Site) string { return igdPath(s, ".log") }

func igdPath(s *topology.Site, ext string) string {
	return filepath.Join(StateDir, "miniupnpd-"+s.Name+ext)
}

// igdFiles are the files the IGDs of a lab leave in StateDir.
func igdFiles() []string {
	fs, _ := filepath.Glob(filepath.Join(StateDir, "miniupnpd-*"))
	return fs
}

// igdSites lists the sites of t whose gateway runs an IGD.
func igdSites(t *topology.Topology) []*topology.Site {
	var ss []*topology.Site
	for _, s := range t.Sites {
		if s.IGD {
			ss = append(ss, s)
		}
	}
	return ss
}

// needIGD checks that miniupnpd is installed when t has igd=on sites.
func needIGD(t *topology.Topology) error {
	if len(igdSites(t)) == 0 {
		return nil
	}
	exe, err := miniupnpd()
	if err != nil {
		return fmt.Errorf("topology %s has igd=on sites: apt-get install miniupnpd-nftables (make deps does it)", t.Name)
	}
	out, _ := exec.Command(exe, "--version").CombinedOutput()
	if !bytes.Contains(out, []byte("nftables")) {
		return fmt.Errorf("topology %s has igd=on sites: %s is not the nftables build (%q); the lab's NATs are nftables rules: apt-get install miniupnpd-nftables",
			t.Name, exe, bytes.TrimSpace(out))
	}
	return nil
}

func miniupnpd() (string, error) {
	if exe, err := exec.LookPath("miniupnpd"); err == nil {
		return exe, nil
	}
	return exec.LookPath("/usr/sbin/miniupnpd")
}

// igdConfig is miniupnpd's configuration for site s: external interface the
// gateway's WAN device, listening (SSDP, NAT-PMP) on the nat nets only,
// secure mode (a host maps ports to itself only), ports 1024 and up for
// the nat nets' hosts, nothing for anyone else. The lease, pid and
// minissdpd socket files are kept in StateDir, apart from any system
// miniupnpd's.
func igdConfig(s *topology.Site, uuid string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by gridlab for site %s\n", s.Name)
	fmt.Fprintf(&b, "ext_ifname=%s\n", WANDev)
	fmt.Fprintf(&b, "ext_perform_stun=yes\next_stun_host=%s\next_stun_port=%d\n", s.WAN, igdSTUNPort)
	for _, n := range s.Nets {
		if n.Kind == topology.NetNAT {
			fmt.Fprintf(&b, "listening_ip=%s\n", n.Name)
		}
	}
	fmt.Fprintf(&b, `http_port=%d
enable_upnp=yes
enable_natpmp=yes
ipv6_disable=yes
secure_mode=yes
system_uptime=no
notify_interval=60
min_lifetime=1
max_lifetime=86400
uuid=%s
friendly_name=gridlab %s gateway
upnp_table_name=%s
upnp_nat_table_name=%s
upnp_forward_chain=%s
upnp_nat_chain=%s
upnp_nat_postrouting_chain=%s
lease_file=%s
minissdpdsocket=%s
`, IGDHTTPPort, uuid, s.Name, IGDTable, IGDTable, igdForwardChain, igdNATChain, igdPostroutingChain,
		igdPath(s, ".leases"), igdPath(s, ".minissdpd.sock"))
	for _, n := range s.Nets {
		if n.Kind == topology.NetNAT {
			fmt.Fprintf(&b, "allow 1024-65535 %s 1024-65535\n", n.Prefix)
		}
	}
	b.WriteString("deny 0-65535 0.0.0.0/0 0-65535\n")
	return b.String()
}

// startIGDs runs miniupnpd on the gateway of every igd=on site, each until
// the lab comes down, and waits until each serves HTTP on its first nat
// net.
//
// miniupnpd exits when its STUN check of the external address gets no
// answer; that happened once in many CI runs with the responder below
// counting no request at all (cause not found: the requests go from the
// gateway to its own address). Such a start is tried again, twice at most,
// and the error names the counts of every try.
func startIGDs(t *topology.Topology) error {
	for _, s := range igdSites(t) {
		var tries []string
		for {
			err := startIGD(s)
			var se *stunError
			if err == nil || !errors.As(err, &se) || len(tries) == 2 {
				if err != nil && len(tries) > 0 {
					err = fmt.Errorf("%w (earlier tries: %s)", err, strings.Join(tries, "; "))
				}
				if err != nil {
					return err
				}
				break
			}
			tries = append(tries, se.Error())
		}
	}
	return nil
}

// stunError says miniupnpd gave up because its STUN check went unanswered,
// with what the lab's responder saw.
type stunError struct {
	site               string
	received, answered int64
}

func (e *stunError) Error() string {
	return fmt.Sprintf("its STUN check failed at site %s, the lab's responder received %d requests and answered %d",
		e.site, e.received, e.answered)
}

func startIGD(s *topology.Site) error {
	exe, err := miniupnpd()
	if err != nil {
		return err
	}
	var lan *topology.Net
	for _, n := range s.Nets {
		if n.Kind == topology.NetNAT && lan == nil {
			lan = n
		}
	}
	u := make([]byte, 16)
	_, _ = rand.Read(u)
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	conf := igdPath(s, ".conf")
	if err := os.WriteFile(conf, []byte(igdConfig(s, uuid)), 0o644); err != nil {
		return err
	}
	var stun net.PacketConn
	err = netns.Do(GatewayNS(s), func() (err error) {
		stun, err = net.ListenPacket("udp4", netip.AddrPortFrom(s.WAN, igdSTUNPort).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("STUN responder for miniupnpd of site %s: %w", s.Name, err)
	}
	defer stun.Close() // miniupnpd asks once, before it serves HTTP
	var stunCount stunCounts
	go serveSTUN(stun, &stunCount)
	logf, err := os.Create(IGDLogPath(s))
	if err != nil {
		return err
	}
	// -d: stay in the foreground and log to stderr.
	cmd := exec.Command("ip", "netns", "exec", GatewayNS(s), exe, "-d", "-f", conf, "-P", igdPath(s, ".pid"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("start miniupnpd on %s: %w", GatewayNS(s), err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaped when down kills it
	fail := func(err error) error {
		log, _ := os.ReadFile(IGDLogPath(s))
		return fmt.Errorf("miniupnpd of site %s (config %s): %w\n%s", s.Name, conf, err, bytes.TrimSpace(log))
	}
	addr := net.JoinHostPort(lan.Gateway.String(), fmt.Sprint(IGDHTTPPort))
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := netns.Do(GatewayNS(s), func() error {
			c, err := net.DialTimeout("tcp4", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			// it says so when it takes its address for a private one.
			if log, _ := os.ReadFile(IGDLogPath(s)); bytes.Contains(log, []byte("Port forwarding is impossible")) ||
				bytes.Contains(log, []byte("Port forwarding is now disabled")) {
				return fail(errors.New("it serves, but will not map ports"))
			}
			return nil
		}
		select {
		case werr := <-exited:
			if log, _ := os.ReadFile(IGDLogPath(s)); bytes.Contains(log, []byte("Performing STUN failed")) {
				return fail(&stunError{site: s.Name, received: stunCount.received.Load(), answered: stunCount.answered.Load()})
			}
			return fail(fmt.Errorf("exited: %v", werr))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(err)
		}
	}
}

// stunCounts counts what serveSTUN saw.
type stunCounts struct{ received, answered atomic.Int64 }

// serveSTUN answers STUN Binding requests on pc until it is closed.
func serveSTUN(pc net.PacketConn, c *stunCounts) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		c.received.Add(1)
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		if resp := stunReply(buf[:n], ua.AddrPort()); resp != nil {
			if _, err := pc.WriteTo(resp, from); err == nil {
				c.answered.Add(1)
			}
		}
	}
}

// stunReply returns the Binding success response (RFC 5389) to req, whose
// XOR-MAPPED-ADDRESS is from, or nil when req is no IPv4 Binding request.
//
// A request is a 20-byte header: type 0x0001 (Binding request), the
// length of the attributes that follow, the magic cookie 0x2112A442 (in
// RFC 3489 requests, the first bytes of the transaction ID) and a 12-byte
// transaction ID. The response copies cookie and ID and carries one
// attribute, XOR-MAPPED-ADDRESS (0x0020, 8 bytes): reserved byte, family 1
// (IPv4), port and address each XORed with the cookie's leading bytes.
func stunReply(req []byte, from netip.AddrPort) []byte {
	if len(req) < 20 || req[0] != 0x00 || req[1] != 0x01 || !from.Addr().Unmap().Is4() {
		return nil
	}
	if n := int(binary.BigEndian.Uint16(req[2:4])); n%4 != 0 || 20+n > len(req) {
		return nil
	}
	resp := make([]byte, 32)
	binary.BigEndian.PutUint16(resp[0:2], 0x0101)
	binary.BigEndian.PutUint16(resp[2:4], 12)
	copy(resp[4:20], req[4:20])
	binary.BigEndian.PutUint16(resp[20:22], 0x0020)
	binary.BigEndian.PutUint16(resp[22:24], 8)
	resp[25] = 1
	binary.BigEndian.PutUint16(resp[26:28], from.Port()^binary.BigEndian.Uint16(resp[4:6]))
	ip := from.Addr().Unmap().As4()
	for i := range ip {
		resp[28+i] = ip[i] ^ resp[4+i]
	}
	return resp
}
