package link

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

var errNoDirectYet = errors.New("no direct path yet (test)")

// A resumable link that starts routed (a's node may only route) moves to
// a direct connection once one can be set up (Options.Upgrade; here a
// node of a's identity that dials directly, as a's would once a firewall
// lets it): the routed connection closes, the stream goes on whole, and
// the switch is recorded.
func TestLinkUpgrade(t *testing.T) {
	key, _ := identity.NewKey()
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: mustCreds(t), Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	start := func(cfg vconn.Config) *vconn.Node {
		cfg.ListenAddr = "127.0.0.1"
		n, err := vconn.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	credsA, _ := pki.NewCredentials(key)
	a := start(vconn.Config{Name: "a", Creds: credsA, Hubs: []string{h.Addr().String()}, Methods: []vconn.Method{vconn.Routed}})
	b := start(vconn.Config{Name: "b", Hubs: []string{h.Addr().String()}})
	twinCreds, _ := pki.NewCredentials(key)
	twin := start(vconn.Config{Creds: twinCreds, Methods: []vconn.Method{vconn.Direct}})
	testwait.Until(t, "a to resolve b", 10*time.Second, func() bool {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		defer rcancel()
		_, err := a.Resolve(rctx, identity.Addr{Node: "b"})
		return err == nil
	})
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo(t, l)
	var open atomic.Bool
	o := Options{Resume: true, Upgrade: true, upgradeDial: func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error) {
		if !open.Load() || via[0] != vconn.Direct {
			return nil, errNoDirectYet
		}
		return twin.DialMachineVia(ctx, b.Machine(), 7000, vconn.Direct)
	}}
	c := dial(t, a, "b:7000", o)
	if c.Method() != vconn.Routed || c.Path() != vconn.Routed || !c.Upgrading() {
		t.Fatalf("the link began %s (path %s, upgrading %v), want routed and upgrading", c.Method(), c.Path(), c.Upgrading())
	}
	// data flows before, while and after the upgrade
	data := TextData(3, 8<<20)
	readc := make(chan []byte, 1)
	go func() {
		var got []byte
		buf := make([]byte, 64<<10)
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		readc <- got
	}()
	write := func(p []byte) {
		for i := 0; i < len(p); i += 64 << 10 {
			if _, err := c.Write(p[i:min(i+64<<10, len(p))]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	write(data[:2<<20])
	open.Store(true)
	stop := make(chan struct{})
	wrote := make(chan int, 1)
	go func() { // keep sending while the link moves
		n := 2 << 20
		for ; n < 6<<20; n += 64 << 10 {
			select {
			case <-stop:
				wrote <- n
				return
			default:
			}
			if _, err := c.Write(data[n : n+64<<10]); err != nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		wrote <- n
	}()
	testwait.Until(t, "the link to carry only its direct connection", 20*time.Second, func() bool {
		live := c.liveConns()
		return len(live) == 1 && live[0].Method() == vconn.Direct
	})
	if c.Path() != vconn.Direct {
		t.Errorf("path %s after the upgrade, want direct", c.Path())
	}
	testwait.Until(t, "the search to end once direct", 5*time.Second, func() bool { return !c.Upgrading() })
	close(stop)
	write(data[<-wrote:])
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	sameData(t, <-readc, data)
	st := c.Stats()
	if len(st.Switches) != 1 || st.Switches[0].From != vconn.Routed || st.Switches[0].To != vconn.Direct {
		t.Errorf("switches %+v, want one from routed to direct", st.Switches)
	}
	t.Logf("switched %+v", st.Switches)
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

func mustCreds(t *testing.T) *pki.Credentials {
	key, _ := identity.NewKey()
	c, err := pki.NewCredentials(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Upgrade (on by default in the command line) costs a link that the race
// gave direct nothing: no search starts, its dial is never called, and
// the link carries its bytes as without it.
func TestLinkUpgradeDirectNoSearch(t *testing.T) {
	a, b := site(t, vconn.Direct)
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo(t, l)
	var dials atomic.Int32
	o := Options{Resume: true, Upgrade: true, upgradeDial: func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error) {
		dials.Add(1)
		return nil, errNoDirectYet
	}}
	c := dial(t, a, "b:7000", o)
	if c.Method() != vconn.Direct || c.Upgrading() || !c.Resumable() {
		t.Fatalf("link %s (upgrading %v, resumable %v), want direct, resumable and not searching", c.Method(), c.Upgrading(), c.Resumable())
	}
	roundTrip(t, c, 1<<20)
	time.Sleep(upgradeFirst + 200*time.Millisecond) // when a search's first try would come
	if n := dials.Load(); n != 0 || len(c.Stats().Switches) != 0 {
		t.Errorf("a direct link looked for a better path: %d dials, switches %+v", n, c.Stats().Switches)
	}
}
