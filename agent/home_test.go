package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// Issue 23: nodes whose home hub h1 (the first of their hubs) dies fall
// over to h2 and return to h1 once it restarts (the same key and
// address), within the probe's bound; a resumable stream between them,
// routed through the hubs and carrying data all along, loses nothing:
// not when h1 dies, not at the move (its circuit stays on h2 while it
// runs), and not when h2 dies after the move (it resumes through h1).
// Loopback TCP, real time: the times logged are what a user sees.
func TestStreamAcrossReturnHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type hubProc struct {
		h    *hubserver.Hub
		cfg  hubserver.Config
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(cfg hubserver.Config) *hubProc {
		h, err := hubserver.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hctx, stop := context.WithCancel(ctx)
		p := &hubProc{h: h, cfg: cfg, stop: stop, done: make(chan struct{})}
		go func() { h.Serve(hctx); close(p.done) }()
		t.Cleanup(func() { stop(); <-p.done })
		return p
	}
	newCreds := func() *pki.Credentials {
		key, _ := identity.NewKey()
		creds, _ := pki.NewCredentials(key)
		return creds
	}
	quiet := func(string, ...any) {}
	h2 := start(hubserver.Config{Name: "h2", Creds: newCreds(), Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond, Logf: quiet})
	h1 := start(hubserver.Config{Name: "h1", Creds: newCreds(), Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond, Logf: quiet,
		Peers: []string{h2.h.Addr().String()}})
	h1addr := h1.h.Addr().String()
	hubs := []string{h1addr, h2.h.Addr().String()}
	var logMu sync.Mutex
	var moves []string
	startAgent := func(name string) *control.Client {
		sock := fmt.Sprintf("@gridlink-test-%d-home-%s", os.Getpid(), name)
		logf := func(f string, a ...any) {
			line := fmt.Sprintf(f, a...)
			logMu.Lock()
			if strings.Contains(line, "moved from hub") {
				moves = append(moves, line)
			}
			logMu.Unlock()
		}
		a, err := Start(ctx, Config{Control: sock, Node: vconn.Config{Name: name, Creds: newCreds(), Hubs: hubs,
			ListenAddr: "127.0.0.1", Methods: []vconn.Method{vconn.Routed}, Logf: logf}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return control.Dial(sock)
	}
	alice, srv := startAgent("alice"), startAgent("srv")
	exposeEcho(ctx, t, srv, 2222)
	holdsBoth := func(h *hubserver.Hub) bool {
		n := 0
		for _, m := range h.Nodes() {
			if m.Name == "alice" || m.Name == "srv" {
				n++
			}
		}
		return n == 2
	}
	testwait.Until(t, "both nodes at h1", 10*time.Second, func() bool { return holdsBoth(h1.h) })

	s, err := alice.Open(ctx, control.ConnectRequest{Addr: "srv:2222"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rc, err := s.Conn()
	if err != nil {
		t.Fatal(err)
	}
	f := startFlow(rc)

	h1.stop()
	<-h1.done
	testwait.Until(t, "both nodes at h2", 15*time.Second, func() bool { return holdsBoth(h2.h) })
	f.progress(t, "after h1 died", 30*time.Second)

	restarted := time.Now()
	cfg := h1.cfg
	cfg.Listen = h1addr
	h1 = start(cfg) // the same key and address
	testwait.Until(t, "both nodes back at h1", 45*time.Second, func() bool { return holdsBoth(h1.h) })
	took := time.Since(restarted)
	logMu.Lock()
	t.Logf("both nodes back at h1 %v after it restarted: %q", took, moves)
	logMu.Unlock()
	// restarted before the nodes' first probe (2 s after their fall, ±10%),
	// or just after it: the next comes 4 s after that one at most
	if bound := 2*2*time.Second*11/10 + 10*time.Second; took > bound {
		t.Errorf("the nodes returned %v after h1 restarted; the probe's bound is %v", took, bound)
	}
	f.progress(t, "after the move", 10*time.Second)

	h2.stop() // the stream's circuit, still through h2, goes: it resumes through h1
	<-h2.done
	f.progress(t, "after h2 died", 30*time.Second)
	if err := f.finish(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the stream echoed %d bytes, each once and in order", f.read.Load())
}

// flow writes a known byte sequence to an echoing stream, 4 KiB every
// 10 ms, and checks that what comes back is that sequence, every byte
// once and in order.
type flow struct {
	c           net.Conn
	stop        chan struct{}
	wrote, read atomic.Int64
	werr, rerr  atomic.Value
	wdone       chan struct{}
	rdone       chan struct{}
}

func flowByte(i int64) byte { return byte(i % 251) }

func startFlow(c net.Conn) *flow {
	f := &flow{c: c, stop: make(chan struct{}), wdone: make(chan struct{}), rdone: make(chan struct{})}
	go func() {
		defer close(f.wdone)
		buf := make([]byte, 4<<10)
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			n := f.wrote.Load()
			for i := range buf {
				buf[i] = flowByte(n + int64(i))
			}
			if _, err := c.Write(buf); err != nil {
				f.werr.Store(err)
				return
			}
			f.wrote.Add(int64(len(buf)))
		}
	}()
	go func() {
		defer close(f.rdone)
		buf := make([]byte, 32<<10)
		for {
			k, err := c.Read(buf)
			n := f.read.Load()
			for i := range k {
				if buf[i] != flowByte(n+int64(i)) {
					f.rerr.Store(fmt.Errorf("byte %d came back as %d, want %d", n+int64(i), buf[i], flowByte(n+int64(i))))
					return
				}
			}
			f.read.Add(int64(k))
			if err != nil {
				if err != io.EOF {
					f.rerr.Store(err)
				}
				return
			}
		}
	}()
	return f
}

// progress waits until 64 KiB more came back, failing on an error.
func (f *flow) progress(t *testing.T, when string, within time.Duration) {
	t.Helper()
	want := f.read.Load() + 64<<10
	testwait.Until(t, "the stream to carry on "+when, within, func() bool {
		if err, _ := f.rerr.Load().(error); err != nil {
			t.Fatalf("the stream %s: %v", when, err)
		}
		if err, _ := f.werr.Load().(error); err != nil {
			t.Fatalf("the stream %s: write: %v", when, err)
		}
		return f.read.Load() >= want
	})
}

// finish stops writing and waits for every byte written to come back.
func (f *flow) finish(within time.Duration) error {
	close(f.stop)
	<-f.wdone
	deadline := time.Now().Add(within)
	for f.read.Load() < f.wrote.Load() {
		if err, _ := f.rerr.Load().(error); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d bytes came back", f.read.Load(), f.wrote.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
