package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// slowServer sends a byte every 10 ms for ever (on real time: a real
// TCP listener, through agents and hubs on loopback).
func slowServer(t *testing.T) string {
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
				for {
					if _, err := c.Write([]byte{'.'}); err != nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// lockedLog collects log lines from several goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) logf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, f+"\n", a...)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A routed stream whose hub goes away mid-flight ends with an error that
// names that hub, at nc and forward (issue 17, item 10): alpha is
// attached to hubs first and second, beta to second; first stops. The
// streams here ask for no resume (ResumeSeconds < 0): a resumable one
// (the default) goes on through second instead (agent/resume_test.go).
func TestRoutedHubDeathNamed(t *testing.T) {
	noResume := control.LinkOptions{ResumeSeconds: -1}
	// nc on pipes hands them to the agent; nc on anything else (a
	// terminal; here readers and writers that are no files) copies the
	// bytes itself, and asks the agent why the stream ended.
	for _, how := range []string{"nc pipes", "nc copies", "forward"} {
		t.Run(how, func(t *testing.T) {
			var hubs []*hubserver.Hub
			var stops []func()
			for i, name := range []string{"first", "second"} {
				key, _ := identity.NewKey()
				creds, _ := pki.NewCredentials(key)
				var peers []string
				if i > 0 {
					peers = []string{hubs[0].Addr().String()}
				}
				h, err := hubserver.New(hubserver.Config{Name: name, Creds: creds, Listen: "127.0.0.1:0", Peers: peers, Interval: 100 * time.Millisecond, Logf: func(string, ...any) {}})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { h.Serve(ctx); close(done) }()
				stop := func() { cancel(); <-done }
				t.Cleanup(stop)
				hubs, stops = append(hubs, h), append(stops, stop)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var logs lockedLog
			var cs []*control.Client
			for i, name := range []string{"alpha", "beta"} {
				sock := fmt.Sprintf("@gridlink-deathtest-%d-%s", os.Getpid(), name)
				hs := []string{hubs[1].Addr().String()}
				if i == 0 {
					hs = []string{hubs[0].Addr().String(), hubs[1].Addr().String()}
				}
				a, err := agent.Start(ctx, agent.Config{Control: sock, Node: vconn.Config{Name: name, Hubs: hs, ListenAddr: "127.0.0.1",
					Methods: []vconn.Method{vconn.Routed}}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { a.Close() })
				cs = append(cs, control.Dial(sock))
			}
			alpha, beta := cs[0], cs[1]
			// beta is found through the hubs once they have linked (a
			// lookup before that is answered "not found": 1 run in 10)
			testwait.Until(t, "alpha to reach beta through the hubs", 20*time.Second, func() bool {
				p, err := alpha.Ping(ctx, control.PingRequest{Addr: "beta", Count: 1, Dials: 1})
				return err == nil && p.Error == ""
			})
			bound := make(chan string, 1)
			go Expose(ctx, beta, control.ExposeRequest{Local: slowServer(t), Port: 8080}, func(a string) { bound <- a })
			<-bound
			var err error
			switch how {
			case "forward":
				l, lerr := net.Listen("tcp", "127.0.0.1:0")
				if lerr != nil {
					t.Fatal(lerr)
				}
				go Forward(ctx, l, alpha, control.ConnectRequest{Addr: "beta:8080", Link: noResume}, Options{Logf: logs.logf})
				c, derr := net.Dial("tcp", l.Addr().String())
				if derr != nil {
					t.Fatal(derr)
				}
				defer c.Close()
				one := make([]byte, 1)
				if _, err := io.ReadFull(c, one); err != nil {
					t.Fatalf("%v; forward's log: %s", err, logs.String())
				}
				stops[0]()
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				// the client is told the stream was cut (a reset), not
				// that it ended (EOF)
				if _, cerr := io.Copy(io.Discard, c); !errors.Is(cerr, syscall.ECONNRESET) {
					t.Errorf("the forwarded connection ended with %v, want a reset: a cut stream must not look finished", cerr)
				}
				testwait.Until(t, "forward to log why the stream ended", 5*time.Second, func() bool {
					return strings.Contains(logs.String(), "first")
				})
				err = fmt.Errorf("%s", logs.String())
			default:
				inR, inW, _ := os.Pipe()
				defer inW.Close()
				outR, outW, _ := os.Pipe()
				var in io.Reader = inR
				var out io.Writer = outW
				if how == "nc copies" {
					in, out = struct{ io.Reader }{inR}, struct{ io.Writer }{outW}
				}
				errc := make(chan error, 1)
				go func() {
					errc <- NC(ctx, alpha, control.ConnectRequest{Addr: "beta:8080", Link: noResume}, in, out)
					outW.Close()
				}()
				one := make([]byte, 1)
				if _, err := io.ReadFull(outR, one); err != nil {
					t.Fatal(err)
				}
				stops[0]()
				go io.Copy(io.Discard, outR)
				select {
				case err = <-errc:
				case <-time.After(30 * time.Second):
					t.Fatal("nc did not end")
				}
			}
			t.Logf("%s: %v", how, err)
			if err == nil || !strings.Contains(err.Error(), "first") {
				t.Errorf("%s: %v, want an error naming hub first", how, err)
			}
		})
	}
}
