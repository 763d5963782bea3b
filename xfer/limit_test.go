package xfer

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/proxy"
)

// --limit bounds the rate in every direction: a put (this end sends), a
// get (the service sends at the rate the client asked for) and a push
// (the source sends to the target at it). 4 MiB at 2 MiB/s take 2 s; the
// bound checked is a loose 1.5 s (the issue saw a get run unbounded at
// 3238 Mbit/s with --limit 20M).
func TestLimitEveryDirection(t *testing.T) {
	const size, limit = 4 << 20, 2 << 20
	rootA, rootB, back := t.TempDir(), t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(rootA, "f"), size, 0o644)
	dialB, _ := service(t, Config{Root: rootB})
	dialA, _ := service(t, Config{Root: rootA, Push: func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error) {
		return dialB(ctx)
	}})
	o := Options{Limit: limit}
	for _, c := range []struct {
		name string
		run  func() (Summary, error)
		got  string
	}{
		{"put", func() (Summary, error) { return Put(ctx, dialB, []string{filepath.Join(rootA, "f")}, "put", o) }, filepath.Join(rootB, "put")},
		{"get", func() (Summary, error) { return Get(ctx, dialA, []string{"f"}, filepath.Join(back, "get"), o) }, filepath.Join(back, "get")},
		{"push", func() (Summary, error) { return Push(ctx, dialA, []string{"f"}, "b", "push", Link{}, o) }, filepath.Join(rootB, "push")},
	} {
		start := time.Now()
		sum, err := c.run()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sameFile(t, filepath.Join(rootA, "f"), c.got)
		if sum.Files != 1 || sum.Bytes != size {
			t.Errorf("%s: %+v", c.name, sum)
		}
		if took < 1500*time.Millisecond {
			t.Errorf("%s of %d bytes with a limit of %d bytes/s took %v (%.0f Mbit/s), want at least 1.5 s", c.name, size, limit, took, float64(size)*8/took.Seconds()/1e6)
		}
	}
}
