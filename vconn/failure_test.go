package vconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// A dial toward a node whose hub the overlay no longer reaches fails at
// once for every method that goes through the hubs, each naming the hubs'
// reason (issue 17: a splice waited 5 s for an answer although the routed
// attempt's error already said "no route to hub"): the hub that cannot
// forward a splice offer answers it, as it answers a reverse request.
func TestNoHubRouteEndsEveryMethod(t *testing.T) {
	ha := testHub(t, "fa")
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	hb, err := hub.New(hub.Config{Name: "fb", Creds: creds, Listen: "127.0.0.1:0", Peers: []string{ha.Addr().String()}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopB := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = hb.Serve(ctx); close(done) }()
	t.Cleanup(func() { stopB(); <-done })

	a := testNode(t, "a", ha, Reverse, Splice, Routed)
	b := testNode(t, "b", hb, Reverse, Splice, Routed)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	bm, err := a.Resolve(context.Background(), identity.Addr{Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	stopB()
	<-done
	// until hub fa has dropped its route to fb
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := a.Try(context.Background(), Routed, bm, 7000)
		if errors.Is(err, ErrNoHubRoute) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("routed to b after its hub stopped: %v", err)
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = a.DialMachine(dctx, bm, 7000)
	if err == nil {
		t.Fatal("dial reached b, whose hub is gone")
	}
	t.Logf("dial: %v", err)
	if strings.Contains(err.Error(), "did not answer the splice offer") || strings.Contains(err.Error(), "did not call back") {
		t.Errorf("a method waited out its time-out although the hubs said why it cannot work: %v", err)
	}
	for _, m := range []Method{Reverse, Splice, Routed} {
		_, err := a.Try(dctx, m, bm, 7000)
		var me *MethodError
		if !errors.As(err, &me) || me.End != Path || !errors.Is(err, ErrNoHubRoute) || !strings.Contains(err.Error(), "no route to hub fb") {
			t.Errorf("%s: %v; want the hubs' reason, no route to hub fb, at the path", m, err)
		}
		if why := Explain(m, err, a.Facts(bm)); !strings.Contains(why, "the hubs have no route between the two sites") {
			t.Errorf("%s explained: %s", m, why)
		}
	}
}
