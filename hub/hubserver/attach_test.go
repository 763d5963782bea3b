package hubserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

// A session whose hub is not up yet attaches in the background: until
// then it says why it is not attached, its requests fail at once with a
// *hub.NotAttachedError, and it attaches once the hub starts; when the hub
// goes, requests fail at once again, naming the lost hub.
func TestAttachBeforeHub(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the hub starts

	var logged strings.Builder
	logs := make(chan string, 64)
	s, err := hub.Connect(hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: "early"}, Hubs: []string{addr},
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

	h, err := New(Config{Name: "late", Creds: creds(t), Listen: addr, Interval: testInterval, Logf: testLogf(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(hctx) }()
	if err := s.WaitAttached(ctx); err != nil {
		t.Fatalf("not attached once the hub started: %v", err)
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
