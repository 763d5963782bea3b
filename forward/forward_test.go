package forward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// twoAgents starts a loopback hub and agents alpha and beta on it.
func twoAgents(t *testing.T) (alpha, beta *control.Client) {
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
	var cs []*control.Client
	for _, name := range []string{"alpha", "beta"} {
		sock := fmt.Sprintf("@gridlink-fwdtest-%d-%s", os.Getpid(), name)
		a, err := agent.Start(ctx, agent.Config{Control: sock, Node: vconn.Config{Name: name, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		cs = append(cs, control.Dial(sock))
	}
	return cs[0], cs[1]
}

// hashServer answers what a client sends, once it half-closes, with its
// SHA-256.
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

func TestExposeForwardNC(t *testing.T) {
	alpha, beta := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ectx, stopExpose := context.WithCancel(ctx)
	bound := make(chan string, 1)
	exposed := make(chan error, 1)
	go func() {
		exposed <- Expose(ectx, beta, control.ExposeRequest{Local: hashServer(t), Port: 8080}, func(a string) { bound <- a })
	}()
	select {
	case a := <-bound:
		if a != "beta:8080" {
			t.Fatalf("exposed at %s", a)
		}
	case err := <-exposed:
		t.Fatal(err)
	}

	msg := bytes.Repeat([]byte("forwarded "), 200000)
	want := sha256.Sum256(msg)

	// forward: a local port leads to beta.grid:8080.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	go Forward(ctx, l, alpha, control.ConnectRequest{Addr: "beta.grid:8080"}, Options{Logf: func(f string, a ...any) { fmt.Fprintf(&logs, f, a...) }})
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, want[:]) {
			t.Fatalf("forward, connection %d: %x %v", i, got, err)
		}
	}

	// nc: stdin's EOF reaches the service, its answer comes out.
	var out bytes.Buffer
	if err := NC(ctx, alpha, control.ConnectRequest{Addr: "beta.grid:8080"}, bytes.NewReader(msg), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want[:]) {
		t.Fatalf("nc: %x", out.Bytes())
	}
	// nc to an unknown name fails clearly.
	err = NC(ctx, alpha, control.ConnectRequest{Addr: "nobody.grid:22"}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("nc to an unknown name: %v", err)
	}

	stopExpose()
	if err := <-exposed; err != nil {
		t.Fatalf("expose after its context ended: %v", err)
	}
	// a forwarded connection to a service no longer exposed is closed,
	// and the forwarder goes on serving.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("got %q from a closed service", b)
	}
	c.Close()
}

// Forward without a log (gridlink forward without -v passes none): a
// connection that cannot be set up is closed, and the forwarder goes on
// (it called the missing log, and the process died of it).
func TestForwardWithoutLog(t *testing.T) {
	alpha, _ := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- Forward(ctx, l, alpha, control.ConnectRequest{Addr: "nobody:22"}, Options{}) }()
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := io.Copy(io.Discard, c); n != 0 || err != nil {
			t.Errorf("a connection to nobody: %d bytes, %v; want closed at once", n, err)
		}
		c.Close()
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Forward: %v", err)
	}
}
