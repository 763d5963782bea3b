package xfer

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gridlink/gridlink/pki/proxy"
)

// A source file written to while it is sent is reported as changed (a
// ChangedError naming it) and not stored: never a torn copy reported as
// verified. Put (this end reads), get (the service reads) and push.
func TestSourceChangedWhileSent(t *testing.T) {
	const size = 4 << 20
	rootA, rootB, back := t.TempDir(), t.TempDir(), t.TempDir()
	src := filepath.Join(rootA, "f")
	dialB, _ := service(t, Config{Root: rootB})
	dialA, _ := service(t, Config{Root: rootA, Push: func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error) {
		return dialB(ctx)
	}})
	for _, c := range []struct {
		name string
		run  func(Options) (Summary, error)
		dest string
	}{
		{"put", func(o Options) (Summary, error) { return Put(ctx, dialB, []string{src}, "put", o) }, filepath.Join(rootB, "put")},
		{"get", func(o Options) (Summary, error) { return Get(ctx, dialA, []string{"f"}, filepath.Join(back, "get"), o) }, filepath.Join(back, "get")},
		{"push", func(o Options) (Summary, error) { return Push(ctx, dialA, []string{"f"}, "b", "push", Link{}, o) }, filepath.Join(rootB, "push")},
	} {
		randomFile(t, src, size, 0o644)
		var once sync.Once
		// once the first block is through, a writer changes the first and
		// the last (same size: only the mtime tells), while the sender
		// still reads: a copy would hold the old first and the new last
		o := Options{Limit: 4 << 20, Progress: func(e Event) {
			if e.Kind == EventBytes && e.N > 0 {
				once.Do(func() {
					f, err := os.OpenFile(src, os.O_WRONLY, 0)
					if err != nil {
						t.Error(err)
						return
					}
					f.WriteAt([]byte("torn"), 100)
					f.WriteAt([]byte("torn"), size-100)
					f.Close()
				})
			}
		}}
		sum, err := c.run(o)
		var ce *ChangedError
		if !errors.As(err, &ce) || !errors.Is(err, ErrSourceChanged) || len(ce.Paths) != 1 || ce.Paths[0] != "f" {
			t.Errorf("%s: %v (%+v), want a ChangedError naming f", c.name, err, sum)
		}
		if sum.Files != 0 || sum.Failed != 1 || !sum.Errors[0].Changed {
			t.Errorf("%s: %+v, want f failed as changed", c.name, sum)
		}
		if _, err := os.Stat(c.dest); !os.IsNotExist(err) {
			t.Errorf("%s: the torn copy was stored (%v)", c.name, err)
		}
	}
}
