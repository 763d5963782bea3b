package vconn

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// A routed connection whose hub goes away mid-flight fails with an
// error that names that hub (issue 17, item 10), although the node has
// a second hub.
func TestRoutedHubDeathNamed(t *testing.T) {
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h1, err := hubserver.New(hubserver.Config{Name: "first", Creds: creds, Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { _ = h1.Serve(ctx1); close(done1) }()
	t.Cleanup(func() { stop1(); <-done1 })
	h2 := testHub(t, "second", h1.Addr().String())
	x, err := Start(context.Background(), Config{Name: "x", Methods: []Method{Routed}, ListenAddr: "127.0.0.1",
		Hubs: []string{h1.Addr().String(), h2.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	y := testNode(t, "y", h2, Routed)
	serveEcho(t, y, 7)
	waitResolvable(t, x, "y")
	c, err := x.Dial(context.Background(), "y:7")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	stop1()
	<-done1
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	t.Logf("read error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "first") {
		t.Errorf("the routed connection's error %v does not name hub first", err)
	}
}
