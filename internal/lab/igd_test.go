package lab

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/internal/lab/topologies"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// miniupnpd's STUN requests: a Binding request with a CHANGE-REQUEST
// attribute (change IP and port flags).
func stunRequest(change byte) []byte {
	req := []byte{0x00, 0x01, 0x00, 0x08, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
		0x00, 0x03, 0x00, 0x04, 0, 0, 0, change}
	return req
}

// mapped decodes a response's XOR-MAPPED-ADDRESS as a client does.
func mapped(resp []byte) netip.AddrPort {
	port := binary.BigEndian.Uint16(resp[26:28]) ^ binary.BigEndian.Uint16(resp[4:6])
	var ip [4]byte
	for i := range ip {
		ip[i] = resp[28+i] ^ resp[4+i]
	}
	return netip.AddrPortFrom(netip.AddrFrom4(ip), port)
}

func TestSTUNReply(t *testing.T) {
	from := netip.MustParseAddrPort("203.0.113.21:40188")
	for _, change := range []byte{0, 2, 4, 6} {
		resp := stunReply(stunRequest(change), from)
		if len(resp) != 32 || resp[0] != 0x01 || resp[1] != 0x01 || string(resp[4:20]) != string(stunRequest(0)[4:20]) {
			t.Fatalf("response %x", resp)
		}
		if got := mapped(resp); got != from {
			t.Errorf("mapped address %s, want %s", got, from)
		}
	}
	for _, bad := range [][]byte{nil, stunRequest(0)[:19], append([]byte{0x01, 0x01}, stunRequest(0)[2:]...), stunRequest(0)[:24]} {
		if resp := stunReply(bad, from); resp != nil {
			t.Errorf("stunReply(%x) = %x, want nothing", bad, resp)
		}
	}
	if resp := stunReply(stunRequest(0), netip.MustParseAddrPort("[2001:db8::1]:1")); resp != nil {
		t.Errorf("answered an IPv6 source: %x", resp)
	}
}

func FuzzSTUNReply(f *testing.F) {
	f.Add(stunRequest(0), uint16(40188))
	f.Add(stunRequest(6)[:20], uint16(1))
	f.Add([]byte{0, 1, 0xff, 0xfc}, uint16(0))
	f.Fuzz(func(t *testing.T, req []byte, port uint16) {
		from := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.21"), port)
		resp := stunReply(req, from)
		if resp == nil {
			return
		}
		if len(resp) != 32 || string(resp[4:20]) != string(req[4:20]) || mapped(resp) != from {
			t.Fatalf("stunReply(%x) = %x", req, resp)
		}
	})
}

// nat-zoo's igd site: its gateway gets a table for miniupnpd, and a
// miniupnpd configuration that serves its LAN only, from the lab's state
// directory.
func TestIGDPlan(t *testing.T) {
	src, _ := topologies.Source("nat-zoo")
	topo, err := topology.Parse("nat-zoo.topo", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, st := range Plan(topo) {
		if strings.Contains(strings.Join(st.Body, "\n"), "table inet "+IGDTable) {
			tables = append(tables, st.NS)
		}
	}
	if strings.Join(tables, " ") != "gl-igd-gw" {
		t.Errorf("IGD tables made in %v, want gl-igd-gw only", tables)
	}
	conf := igdConfig(topo.Site("igd"), "u")
	for _, want := range []string{"ext_ifname=wan0\n", "listening_ip=lan\n", "enable_natpmp=yes\n", "secure_mode=yes\n",
		"ext_stun_host=203.0.113.21\n", "upnp_nat_table_name=" + IGDTable + "\n", "lease_file=" + StateDir + "/miniupnpd-igd.leases\n",
		"minissdpdsocket=" + StateDir + "/", "allow 1024-65535 192.168.15.0/24 1024-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("miniupnpd config lacks %q:\n%s", want, conf)
		}
	}
}
