package peercred

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/peercred/peercredtest"
)

// accepted connects with dial to a new loopback listener of network and
// returns the accepted end.
func accepted(t *testing.T, network, addr string, dial func(addr string) net.Conn) (server, client net.Conn) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client = dial(l.Addr().String())
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// The uid of a loopback client, over IPv4, IPv6 and a unix socket: this
// process's own, and another account's (nobody), from the kernel.
func TestUID(t *testing.T) {
	peercredtest.NeedRoot(t)
	plain := func(network string) func(string) net.Conn {
		return func(addr string) net.Conn {
			c, err := net.Dial(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	as := func(network string) func(string) net.Conn {
		return func(addr string) net.Conn { return peercredtest.DialAs(t, peercredtest.Nobody, network, addr) }
	}
	sock := t.TempDir() + "/s"
	for _, tc := range []struct {
		name, network, addr string
		dial                func(string) net.Conn
		want                int
	}{
		{"own IPv4", "tcp", "127.0.0.1:0", plain("tcp"), os.Geteuid()},
		{"nobody IPv4", "tcp", "127.0.0.1:0", as("tcp"), peercredtest.Nobody},
		{"nobody IPv6", "tcp", "[::1]:0", as("tcp"), peercredtest.Nobody},
		{"nobody to a dual-stack listener, IPv4-mapped", "tcp", ":0", func(addr string) net.Conn {
			_, port, _ := net.SplitHostPort(addr)
			return as("tcp")("127.0.0.1:" + port)
		}, peercredtest.Nobody},
		{"own unix", "unix", sock, plain("unix"), os.Geteuid()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := accepted(t, tc.network, tc.addr, tc.dial)
			uid, err := UID(s)
			if err != nil || uid != tc.want {
				t.Fatalf("UID = %d, %v; want %d", uid, err, tc.want)
			}
		})
	}
}

// Admit serves this process's uid and root, refuses another account
// naming both uids, and refuses a client whose socket is already closed
// (the kernel reports an orphan socket as root's: it must not pass).
func TestAdmit(t *testing.T) {
	peercredtest.NeedRoot(t)
	s, _ := accepted(t, "tcp", "127.0.0.1:0", func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	if err := Admit("socks", s); err != nil {
		t.Errorf("this process's uid: %v", err)
	}
	s, _ = accepted(t, "tcp", "127.0.0.1:0", func(addr string) net.Conn { return peercredtest.DialAs(t, peercredtest.Nobody, "tcp", addr) })
	err := Admit("socks", s)
	var re *RefusedError
	if !errors.As(err, &re) || err.Error() != "socks of uid 0 refuses uid 65534" {
		t.Errorf("nobody: %v; want socks of uid 0 refuses uid 65534", err)
	}
	s, c := accepted(t, "tcp", "127.0.0.1:0", func(addr string) net.Conn { return peercredtest.DialAs(t, peercredtest.Nobody, "tcp", addr) })
	c.Close() // an orphan now, in FIN-WAIT: owned by nobody's file no more
	io.ReadAll(s)
	err = Admit("forward", s)
	if !errors.Is(err, ErrUnknown) || !errors.Is(err, ErrNotLocal) || !strings.Contains(err.Error(), "forward of uid 0 refuses") {
		t.Errorf("a closed client: %v; want refused as unknown", err)
	}
}

// A user's listener serves that user and root, and no one else.
func TestServes(t *testing.T) {
	for _, tc := range []struct {
		owner, caller int
		want          string
	}{
		{1000, 1000, ""},
		{1000, 0, ""},
		{1000, 1001, "socks of uid 1000 refuses uid 1001"},
		{0, 65534, "socks of uid 0 refuses uid 65534"},
	} {
		err := serves("socks", tc.owner, tc.caller)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("owner %d, caller %d: %v; want %q", tc.owner, tc.caller, err, tc.want)
		}
	}
}

func TestParseDiagMsg(t *testing.T) {
	r := diagReq{family: afINET, local: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 1080}}
	b := append(append([]byte{afINET, 1, 0, 0}, r.Serialize()[8:]...), make([]byte, 20)...)
	b[offUID] = 0xe8
	b[offUID+1] = 0x03
	b[offInode] = 7
	m, err := parseDiagMsg(b)
	if err != nil || m.sport != 40000 || m.dport != 1080 || !m.src.Equal(r.local.IP) || !m.dst.Equal(r.remote.IP) || m.uid != 1000 || m.inode != 7 {
		t.Errorf("parsed %+v %v", m, err)
	}
	if _, err := parseDiagMsg(b[:diagMsgLen-1]); err == nil {
		t.Error("a short message parsed")
	}
}

func FuzzParseDiagMsg(f *testing.F) {
	f.Add(make([]byte, diagMsgLen))
	f.Add([]byte{afINET})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseDiagMsg(b)
		if err == nil && (len(b) < diagMsgLen || m.src == nil || m.dst == nil) {
			t.Fatalf("parsed %x as %+v", b, m)
		}
	})
}
