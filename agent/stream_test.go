package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

func startHub(t *testing.T) string {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: creds, Listen: "127.0.0.1:0"})
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

	ex, err := cb.Expose(ctx, ExposeRequest{Local: hashServer(t), Port: 2222, Name: "hash"})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if ex.Addr != "beta:2222" {
		t.Errorf("exposed at %s, want beta:2222", ex.Addr)
	}
	if _, err := cb.Expose(ctx, ExposeRequest{Local: "127.0.0.1:1", Name: "hash"}); err == nil || !strings.Contains(err.Error(), "already taken") {
		t.Errorf("a second service named hash: %v", err)
	}
	for i, opts := range []LinkOptions{{}, {Streams: 4, Compression: "s2"}} {
		addr := "beta.grid:2222"
		if i == 1 {
			addr = "beta:hash" // by its name in beta's directory
		}
		c, err := ca.Connect(ctx, ConnectRequest{Addr: addr, Link: opts})
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
		_, err := ca.Connect(ctx, ConnectRequest{Addr: "beta:2222"})
		var se *StreamError
		if errors.As(err, &se) && se.Kind == KindRefused {
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
		req  ConnectRequest
		kind string
	}{
		{ConnectRequest{Addr: "nosuchnode.grid:22"}, KindUnknownName},
		{ConnectRequest{Addr: "beta:4444"}, KindRefused},
		{ConnectRequest{Addr: "beta:nosuchservice"}, KindRefused},
		{ConnectRequest{Addr: "beta:22", Link: LinkOptions{Compression: "lzma"}}, KindBadRequest},
		{ConnectRequest{Addr: "be ta:22"}, KindBadRequest},
		{ConnectRequest{Addr: "127.0.0.1:1", Exit: "beta"}, KindNotAllowed},
	} {
		_, err := ca.Connect(ctx, tc.req)
		var se *StreamError
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
	b, err := ca.Bind(ctx, BindRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Addr, "alpha:") {
		t.Fatalf("bound at %s", b.Addr)
	}
	go func() {
		c, err := cb.Connect(ctx, ConnectRequest{Addr: b.Addr})
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

	b2, err := ca.Bind(ctx, BindRequest{Port: 5000})
	if err != nil {
		t.Fatal(err)
	}
	b2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b3, err := ca.Bind(ctx, BindRequest{Port: 5000})
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

// An agent with AllowExit dials TCP addresses for others.
func TestStreamExit(t *testing.T) {
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	control := "@gridlink-test-exit-" + t.Name()
	ex, err := Start(context.Background(), Config{Control: control, AllowExit: true, Node: vconn.Config{Name: "exitnode", Hubs: []string{hubAddr}, ListenAddr: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ca.Connect(ctx, ConnectRequest{Addr: hashServer(t), Exit: "exitnode.grid"})
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
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	_, err = ca.Connect(ctx, ConnectRequest{Addr: closed, Exit: "exitnode"})
	var se *StreamError
	if !errors.As(err, &se) || se.Kind != KindRefused {
		t.Fatalf("exit to a closed port: %v", err)
	}
}

func FuzzEvent(f *testing.F) {
	f.Add(appendEvent(nil, Event{Bound: "alpha:49152"}))
	f.Add(appendEvent(nil, Event{Error: "x", Kind: KindRefused}))
	f.Add(appendEvent(nil, Event{Service: "web"}))
	f.Add([]byte("{}\n"))
	f.Add([]byte("{\"peer\":1}\n"))
	f.Add(bytes.Repeat([]byte(" "), MaxEventLine+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		ev, err := readEvent(r)
		if err != nil {
			return
		}
		used := len(b) - r.Len()
		if used > MaxEventLine || b[used-1] != '\n' || bytes.IndexByte(b[:used-1], '\n') >= 0 {
			t.Fatalf("read %d bytes of %q", used, b)
		}
		again, err := readEvent(bytes.NewReader(appendEvent(nil, ev)))
		if err != nil || again != ev {
			t.Fatalf("%+v does not round-trip: %+v %v", ev, again, err)
		}
	})
}

func TestEventClipped(t *testing.T) {
	b := appendEvent(nil, Event{Error: strings.Repeat("é", 2000), Kind: KindFailed})
	if len(b) > MaxEventLine {
		t.Fatalf("event of %d bytes", len(b))
	}
	if _, err := readEvent(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}
