package socks

import (
	"bytes"
	"net/netip"
	"testing"
)

func ipv4zero() netip.Addr { return netip.IPv4Unspecified() }

func FuzzRequest(f *testing.F) {
	f.Add(encodeRequest(CmdConnect, Addr{Host: "g5k-n1.grid", Port: 22}))
	f.Add(encodeRequest(CmdBind, Addr{IP: ipv4zero()}))
	f.Add(encodeRequest(CmdConnect, Addr{IP: netip.MustParseAddr("2001:db8::1"), Port: 80}))
	f.Add([]byte{5, 1, 0, 3, 0, 0, 80})
	f.Add([]byte{5, 1, 0, 9})
	f.Add([]byte{5, 1, 0, 3, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		// what decodes re-encodes to the bytes it came from.
		again := encodeRequest(req.Cmd, req.Addr)
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("%v decoded to %+v, encodes to %v", b, req, again)
		}
	})
}

func FuzzGreeting(f *testing.F) {
	f.Add([]byte{5, 1, 0})
	f.Add([]byte{5, 2, 0, 2})
	f.Add([]byte{5, 0})
	f.Add([]byte{4, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readGreeting(bytes.NewReader(b))
		if err == nil && (len(m) == 0 || len(m) != int(b[1]) || !bytes.Equal(m, b[2:2+len(m)])) {
			t.Fatalf("%v: methods %v", b, m)
		}
	})
}

func FuzzAuth(f *testing.F) {
	f.Add([]byte{1, 5, 'a', 'l', 'i', 'c', 'e', 2, 'p', 'w'})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{2, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, p, err := readAuth(bytes.NewReader(b))
		if err == nil && 3+len(u)+len(p) > len(b) {
			t.Fatalf("%v: user %q password %q longer than the input", b, u, p)
		}
	})
}
