package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

func nodes(t *testing.T) (a, b *vconn.Node) {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: creds, Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	start := func(name string) *vconn.Node {
		n, err := vconn.Start(context.Background(), vconn.Config{Name: name, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	return start("a"), start("b")
}

// A client's report agrees with what the server counted, per option.
func TestRunAndServe(t *testing.T) {
	a, b := nodes(t)
	l, err := link.Listen(b, Port, link.ListenOptions{AllowPlain: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, l, t.Logf) }()
	for _, o := range []Options{
		{Data: "zero"},
		{Data: "text", Link: link.Options{Streams: 3, Compression: link.CompressS2}},
		{Data: "random", Link: link.Options{Plain: true, Streams: 2}},
	} {
		o.Duration, o.Omit, o.Interval = 1200*time.Millisecond, 400*time.Millisecond, 300*time.Millisecond
		var reported int
		o.Report = func(Interval) { reported++ }
		var c *link.Conn
		testwait.Until(t, "a link to b:5201", 10*time.Second, func() bool {
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			defer dcancel()
			c, err = link.Dial(dctx, a, "b:5201", o.Link)
			if err != nil {
				t.Logf("dial b:5201: %v", err)
			}
			return err == nil
		})
		res, err := Run(c, o, 0)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		if res.Bytes <= 0 || res.Mbps <= 0 || res.SteadyMbps <= 0 || res.Data != o.Data || res.Encrypt == o.Link.Plain {
			t.Errorf("%+v: report %+v", o, res)
		}
		if res.SteadyFrom != "receiver" || res.SentSteadyMbps <= 0 {
			t.Errorf("%+v: steady rate from the %q, sender's %.1f Mbit/s: want the receiver's timeline", o, res.SteadyFrom, res.SentSteadyMbps)
		}
		if n := len(res.Intervals); n < 3 || n > 5 || reported != n {
			t.Errorf("%+v: %d intervals (%d reported), want about 4", o, n, reported)
		}
		if o.Link.Compression == link.CompressS2 && res.WireBytes*2 > res.Bytes {
			t.Errorf("text with s2: %d bytes took %d on the wire", res.Bytes, res.WireBytes)
		}
		if want := max(o.Link.Streams, 1); res.Streams != want {
			t.Errorf("%+v: %d streams, want %d", o, res.Streams, want)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := Run(nil, Options{Duration: time.Second, Omit: time.Second}, 0); err == nil || !strings.Contains(err.Error(), "leaves nothing to measure") {
		t.Errorf("omitting the whole run: %v", err)
	}
}

func TestSources(t *testing.T) {
	if _, err := NewSource("ones"); err == nil || !strings.Contains(err.Error(), "zero, random or text") {
		t.Errorf("unknown data: %v", err)
	}
	r, _ := NewSource("random")
	x, y := make([]byte, 4096), make([]byte, 4096)
	r(x)
	r(y)
	if bytes.Equal(x, y) || bytes.Count(x, []byte{0}) > 100 {
		t.Error("random data repeats or is mostly zeros")
	}
	txt, _ := NewSource("text")
	txt(x)
	if bytes.Count(x, []byte("\n")) < 10 {
		t.Errorf("text has no lines: %q", x[:200])
	}
	z, _ := NewSource("zero")
	z(x)
	if !bytes.Equal(x, make([]byte, len(x))) {
		t.Error("zero data is not zeros")
	}
}

// A server that predates the timeline answers the count alone: the client
// measures as before, its steady rate the sender's count, and says so.
func TestRunOldServer(t *testing.T) {
	a, b := nodes(t)
	l, err := link.Listen(b, Port, link.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { // the old serveOne
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				_, _ = c.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
				_ = c.(*link.Conn).CloseWrite()
			}()
		}
	}()
	var c *link.Conn
	testwait.Until(t, "a link to b:5201", 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err = link.Dial(ctx, a, "b:5201", link.Options{Resume: true})
		return err == nil
	})
	res, err := Run(c, Options{Data: "random", Duration: 800 * time.Millisecond, Omit: 200 * time.Millisecond}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.SteadyFrom != "sender" || res.SteadyMbps != res.SentSteadyMbps || res.SteadyMbps <= 0 {
		t.Errorf("against an old server: steady %.1f Mbit/s from the %q (sender's %.1f), want the sender's", res.SteadyMbps, res.SteadyFrom, res.SentSteadyMbps)
	}
}
