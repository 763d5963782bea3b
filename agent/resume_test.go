package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// A stream request's link is resumable unless it says otherwise, with
// the limit it asks for.
func TestLinkOptionsResume(t *testing.T) {
	for _, c := range []struct {
		in      control.LinkOptions
		resume  bool
		timeout time.Duration
	}{
		{control.LinkOptions{}, true, 0}, // link's default: 30 s
		{control.LinkOptions{ResumeSeconds: 2.5, Streams: 2}, true, 2500 * time.Millisecond},
		{control.LinkOptions{ResumeSeconds: -1}, false, 0},
	} {
		lo, err := linkOptions(c.in)
		if err != nil || lo.Resume != c.resume || lo.Config.ResumeTimeout != c.timeout {
			t.Errorf("%+v: resume %v after %v (%v), want %v after %v", c.in, lo.Resume, lo.Config.ResumeTimeout, err, c.resume, c.timeout)
		}
	}
}

// A stream through the agents, routed through hub h1, outlives h1: both
// nodes attach to h2, the link sets a connection up again through it,
// and the stream goes on, every byte echoed once and in order. A stream
// that asked for no resume (ResumeSeconds < 0) dies with h1.
func TestStreamSurvivesHubDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newHub := func(name string, peers ...string) (*hubserver.Hub, context.CancelFunc) {
		key, _ := identity.NewKey()
		creds, _ := pki.NewCredentials(key)
		h, err := hubserver.New(hubserver.Config{Name: name, Creds: creds, Listen: "127.0.0.1:0", Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		hctx, stop := context.WithCancel(ctx)
		go h.Serve(hctx)
		return h, stop
	}
	h2, stop2 := newHub("h2")
	defer stop2()
	h1, stop1 := newHub("h1", h2.Addr().String())
	defer stop1()
	hubs := []string{h1.Addr().String(), h2.Addr().String()}
	start := func(name string) *control.Client {
		sock := fmt.Sprintf("@gridlink-test-%d-resume-%s", os.Getpid(), name)
		key, _ := identity.NewKey()
		creds, _ := pki.NewCredentials(key)
		a, err := Start(ctx, Config{Control: sock, Node: vconn.Config{Name: name, Creds: creds, Hubs: hubs,
			ListenAddr: "127.0.0.1", Methods: []vconn.Method{vconn.Routed}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return control.Dial(sock)
	}
	alice, srv := start("alice"), start("srv")
	exposeEcho(ctx, t, srv, 2222)

	echoes := func(c io.ReadWriter, msg string) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if !bytes.Equal(got, []byte(msg)) {
			return fmt.Errorf("echoed %q, want %q", got, msg)
		}
		return nil
	}
	open := func(lo control.LinkOptions) *control.Stream {
		s, err := alice.Open(ctx, control.ConnectRequest{Addr: "srv:2222", Link: lo})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	resumable, plain := open(control.LinkOptions{}), open(control.LinkOptions{ResumeSeconds: -1})
	rc, err := resumable.Conn()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := plain.Conn()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []io.ReadWriter{rc, pc} {
		if err := echoes(c, "before h1 dies"); err != nil {
			t.Fatal(err)
		}
	}
	stop1()
	// what is written while no path is up goes once the link resumes
	msg := bytes.Repeat([]byte("after h1 died. "), 20000)
	if err := echoes(rc, string(msg)); err != nil {
		t.Fatalf("the resumable stream after h1 died: %v", err)
	}
	if d, ok := pc.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	_, perr := io.ReadFull(pc, make([]byte, 1))
	if perr == nil {
		t.Errorf("the stream that asked for no resume read a byte after its hub died")
	}
	t.Logf("the stream without resume: %v", perr)
}
