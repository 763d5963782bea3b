package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
)

// grid is a small real grid on loopback for the dashboard's tests: a hub
// with a status socket, the user's agent, two transfer services (srcsvc
// over src, dstsvc over dst), and a dashboard for them.
type grid struct {
	hub      *gridlink.Hub
	hubSock  string
	agent    *gridlink.Agent
	control  string
	src, dst string
	srcSvc   *gridlink.TransferService
	dash     *Server
	log      *syncBuffer
}

// syncBuffer is a log sink tests read while the dashboard writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var testCtx = context.Background()

func newGrid(t *testing.T) *grid {
	t.Helper()
	return newGridWith(t, nil)
}

// newGridWith is newGrid with the dashboard's configuration changed by
// change (if not nil).
func newGridWith(t *testing.T, change func(*Config)) *grid {
	t.Helper()
	g := &grid{src: t.TempDir(), dst: t.TempDir(), log: &syncBuffer{}}
	g.hubSock = fmt.Sprintf("@gridlink-dash-test-hub-%d-%s", os.Getpid(), rand.Text()[:8])
	h, err := gridlink.NewHub(gridlink.HubConfig{Name: "site", Listen: "127.0.0.1:0", Control: g.hubSock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx)
	hubDone := make(chan error, 1)
	go func() { hubDone <- h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-hubDone })
	g.hub = h
	node := func(name string) gridlink.Config {
		return gridlink.Config{Name: name, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	g.control = fmt.Sprintf("@gridlink-dash-test-agent-%d-%s", os.Getpid(), rand.Text()[:8])
	a, err := gridlink.StartAgent(sctx, gridlink.AgentConfig{Node: node("me"), Control: g.control})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	g.agent = a
	for _, svc := range []struct {
		name, root string
		keep       **gridlink.TransferService
	}{{"srcsvc", g.src, &g.srcSvc}, {"dstsvc", g.dst, nil}} {
		cfg := node(svc.name)
		n, err := gridlink.StartAttached(sctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := gridlink.ServeTransfers(n, cfg, gridlink.ServeConfig{Root: svc.root})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx) }()
		t.Cleanup(func() { s.Close(); <-done; n.Close() })
		if svc.keep != nil {
			*svc.keep = s
		}
	}
	dc := Config{Control: g.control, Hubs: []string{g.hubSock}, Interval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(g.log, nil)), Copy: gridlink.CopyConfig{Node: node("dash")}}
	if change != nil {
		change(&dc)
	}
	d, err := New(dc)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(testCtx)
	dDone := make(chan error, 1)
	go func() { dDone <- d.Serve(dctx) }()
	t.Cleanup(func() {
		dcancel()
		if err := <-dDone; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	g.dash = d
	return g
}

// client is an HTTP client of the dashboard signed on with its address
// (the cookie), and the token for changes.
func (g *grid) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(g.dash.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), g.dash.token) {
		t.Fatalf("signing on: %s: %s", resp.Status, body)
	}
	return c
}

func (g *grid) base() string { return "http://" + g.dash.Addr().String() }

// post sends a change with the token header and decodes the answer into
// out; it returns the status code.
func (g *grid) post(t *testing.T, c *http.Client, path string, in, out any) int {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest("POST", g.base()+path, bytes.NewReader(b))
	req.Header.Set(TokenHeader, g.dash.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("POST %s: %s: %v", path, resp.Status, err)
		}
	}
	return resp.StatusCode
}

func (g *grid) state(t *testing.T, c *http.Client) State {
	t.Helper()
	resp, err := c.Get(g.base() + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("state: %s: %v", resp.Status, err)
	}
	return st
}

// events reads the state events of GET /events, sending each to the
// channel it returns until the test ends.
func (g *grid) events(t *testing.T, c *http.Client) <-chan State {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx)
	req, _ := http.NewRequestWithContext(ctx, "GET", g.base()+"/events", nil)
	hc := *c
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	ch := make(chan State, 64)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "state":
				var st State
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &st); err != nil {
					t.Errorf("an event that is no state: %v: %q", err, line)
					return
				}
				select {
				case ch <- st:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// randomFile writes size random bytes to dir/name.
func randomFile(t *testing.T, dir, name string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// tokenURL is u with the token parameter set to tok.
func tokenURL(u, tok string) string {
	p, _ := url.Parse(u)
	q := p.Query()
	q.Set(TokenParam, tok)
	p.RawQuery = q.Encode()
	return p.String()
}
