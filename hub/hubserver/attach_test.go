package hubserver

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/internal/testwait"
)

// A session whose hub is not up yet attaches in the background: until
// then it says why it is not attached, its requests fail at once with a
// *hub.NotAttachedError, and it attaches once the hub starts; when the hub
// goes, requests fail at once again, naming the lost hub. (On an
// in-memory network in a synctest bubble: the session's retries wait on
// synthetic time.)
func TestAttachBeforeHub(t *testing.T) {
	synctest.Test(t, testAttachBeforeHub)
}

func testAttachBeforeHub(t *testing.T) {
	// Last (the first cleanup runs last): the trunks' closing goroutines
	// sleep too, and a bubble ends only once every goroutine has.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	var network memnet.Network
	start := time.Now()
	ln, err := network.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the hub starts

	var logged strings.Builder
	logs := make(chan string, 64)
	s, err := hub.Connect(hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: "early"}, Hubs: []string{addr}, Dial: network.Dial,
		Logf: func(f string, a ...any) {
			select {
			case logs <- f:
			default:
			}
			testLogf(t, "")(f, a...)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.FirstRound():
	case <-time.After(10 * time.Second):
		t.Fatal("the first round of attempts did not end")
	}
	var na *hub.NotAttachedError
	if err := s.NotAttached(); !errors.As(err, &na) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("not attached: %v; want a *hub.NotAttachedError for a refused connection", err)
	}
	// the session logs the round's failure just after it ends the first
	// round: wait for the line, not for a moment.
	deadline := time.After(10 * time.Second)
	for !strings.Contains(logged.String(), "attaching to %s, retrying") {
		select {
		case f := <-logs:
			logged.WriteString(f)
		case <-deadline:
			t.Fatalf("no \"attaching to HUB: reason, retrying\" logged: %q", logged.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Lookup(ctx, "anyone")
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "not attached to any hub since ") {
		t.Errorf("lookup without a hub: %v; want a *hub.NotAttachedError", err)
	}
	if ctx.Err() != nil {
		t.Errorf("lookup without a hub waited for its context")
	}

	ln, err = network.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Name: "late", Creds: creds(t), Listener: ln, Interval: testInterval, Logf: testLogf(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(hctx) }()
	if err := s.WaitAttached(ctx); err != nil {
		t.Fatalf("not attached once the hub started: %v", err)
	}
	// the first round failed at once, before the hub started; the next
	// round after it did found it: at most two backoffs later (250 ms,
	// then 500 ms; the hub starts before or after the second round, as
	// the test reads the first round's log line)
	if took := time.Since(start); took != 250*time.Millisecond && took != 750*time.Millisecond {
		t.Errorf("attached %v after the start, want 250ms or 750ms: after the first or second backoff", took)
	}
	if s.NotAttached() != nil || s.Hub().Name != "late" {
		t.Errorf("attached to %q, not attached: %v", s.Hub().Name, s.NotAttached())
	}
	if _, err := s.Lookup(ctx, "early"); err != nil {
		t.Errorf("lookup through the hub: %v", err)
	}

	stop()
	<-done
	testwait.Until(t, "the session to lose its hub", 10*time.Second, func() bool { return s.NotAttached() != nil })
	_, err = s.Lookup(ctx, "early")
	if !errors.As(err, &na) || na.Since.IsZero() {
		t.Errorf("lookup after the hub went: %v; want a *hub.NotAttachedError", err)
	}
	select {
	case <-s.GaveUp():
		t.Errorf("the session gave up: %v", s.Refused())
	default:
	}
}
