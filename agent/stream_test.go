package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

func startHub(t *testing.T) string { return startNamedHub(t, "site") }

// startNamedHub serves a hub of fresh credentials on loopback until the
// test ends, and returns its address.
func startNamedHub(t *testing.T, name string) string {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: name, Creds: creds, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go h.Serve(ctx)
	return h.Addr().String()
}

// a loopback TCP service that answers each line-less message with its
// SHA-256 after the client half-closes.
func hashServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h := sha256.New()
				io.Copy(h, c)
				c.Write(h.Sum(nil))
			}()
		}
	}()
	return l.Addr().String()
}

// Expose on one agent, connect through another: the bytes arrive, the
// half-close carries through both agents and the answer comes back.
func TestStreamExposeConnect(t *testing.T) {
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	_, cb := startAgent(t, "beta", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ex, err := cb.Expose(ctx, control.ExposeRequest{Local: hashServer(t), Port: 2222, Name: "hash"})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if ex.Addr != "beta:2222" {
		t.Errorf("exposed at %s, want beta:2222", ex.Addr)
	}
	if _, err := cb.Expose(ctx, control.ExposeRequest{Local: "127.0.0.1:1", Name: "hash"}); err == nil || !strings.Contains(err.Error(), "already taken") {
		t.Errorf("a second service named hash: %v", err)
	}
	for i, opts := range []control.LinkOptions{{}, {Streams: 4, Compression: "s2"}} {
		addr := "beta.grid:2222"
		if i == 1 {
			addr = "beta:hash" // by its name in beta's directory
		}
		c, err := ca.Connect(ctx, control.ConnectRequest{Addr: addr, Link: opts})
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		msg := bytes.Repeat([]byte("0123456789"), 300000)
		go func() { c.Write(msg); c.(interface{ CloseWrite() error }).CloseWrite() }()
		got, err := io.ReadAll(c)
		c.Close()
		want := sha256.Sum256(msg)
		if err != nil || !bytes.Equal(got, want[:]) {
			t.Errorf("%+v: answer %x, %v; want %x", opts, got, err, want)
		}
	}
	// the exposure ends with its client.
	ex.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := ca.Connect(ctx, control.ConnectRequest{Addr: "beta:2222"})
		var se *control.StreamError
		if errors.As(err, &se) && se.Kind == control.KindRefused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the exposure ended: %v, want refused", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStreamErrors(t *testing.T) {
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	startAgent(t, "beta", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		req  control.ConnectRequest
		kind string
	}{
		{control.ConnectRequest{Addr: "nosuchnode.grid:22"}, control.KindUnknownName},
		{control.ConnectRequest{Addr: "beta:4444"}, control.KindRefused},
		{control.ConnectRequest{Addr: "beta:nosuchservice"}, control.KindRefused},
		{control.ConnectRequest{Addr: "beta:22", Link: control.LinkOptions{Compression: "lzma"}}, control.KindBadRequest},
		{control.ConnectRequest{Addr: "be ta:22"}, control.KindBadRequest},
		{control.ConnectRequest{Addr: "127.0.0.1:1", Exit: "beta"}, control.KindNotAllowed},
	} {
		_, err := ca.Connect(ctx, tc.req)
		var se *control.StreamError
		if !errors.As(err, &se) || se.Kind != tc.kind {
			t.Errorf("%+v: %v, want kind %s", tc.req, err, tc.kind)
		}
	}
}

// Bind on one agent; the peer connects through another; bytes flow both
// ways. A bind whose client leaves frees its port.
func TestStreamBind(t *testing.T) {
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	ab, cb := startAgent(t, "beta", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := ca.Bind(ctx, control.BindRequest{Peer: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Addr, "alpha:") {
		t.Fatalf("bound at %s", b.Addr)
	}
	go func() {
		c, err := cb.Connect(ctx, control.ConnectRequest{Addr: b.Addr})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		c.Write([]byte("hello"))
		io.Copy(io.Discard, c)
	}()
	c, peer, err := b.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(peer, "beta:") && !strings.HasPrefix(peer, ab.Node().ID().String()+":") {
		t.Errorf("peer %s", peer)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("got %q %v", got, err)
	}
	c.Close()

	b2, err := ca.Bind(ctx, control.BindRequest{Peer: "beta", Port: 5000})
	if err != nil {
		t.Fatal(err)
	}
	b2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b3, err := ca.Bind(ctx, control.BindRequest{Peer: "beta", Port: 5000})
		if err == nil {
			b3.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 5000 still bound after its client left: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An agent with AllowExit dials TCP addresses for others (public ones
// here, stood in for by loopback listeners: exitpolicy.go refuses the
// exit host's loopback).
func TestStreamExit(t *testing.T) {
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	n := &testNet{standIn: map[netip.AddrPort]string{
		netip.MustParseAddrPort("203.0.113.7:80"): hashServer(t),
		netip.MustParseAddrPort("203.0.113.7:81"): closed,
	}}
	sock := "@gridlink-test-exit-" + t.Name()
	ex, err := Start(context.Background(), Config{Control: sock, AllowExit: true, exitNet: n.exitNet(), Node: vconn.Config{Name: "exitnode", Hubs: []string{hubAddr}, ListenAddr: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ca.Connect(ctx, control.ConnectRequest{Addr: "203.0.113.7:80", Exit: "exitnode.grid"})
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	c.(interface{ CloseWrite() error }).CloseWrite()
	got, _ := io.ReadAll(c)
	want := sha256.Sum256([]byte("x"))
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("through the exit: %x", got)
	}
	_, err = ca.Connect(ctx, control.ConnectRequest{Addr: "203.0.113.7:81", Exit: "exitnode"})
	var se *control.StreamError
	if !errors.As(err, &se) || se.Kind != control.KindRefused {
		t.Fatalf("exit to a closed port: %v", err)
	}
}
