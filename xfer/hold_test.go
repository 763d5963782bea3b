package xfer

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/proxy"
)

// bytesSeen records a transfer's progress: the highest count of each
// file's bytes, from any goroutine.
type bytesSeen struct {
	mu   sync.Mutex
	done int64
}

func (b *bytesSeen) event(e Event) {
	if e.Kind == EventBytes {
		b.mu.Lock()
		b.done = max(b.done, e.N)
		b.mu.Unlock()
	}
}

func (b *bytesSeen) get() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// A put paused after its first block holds the rest until resumed, and
// then stores the same bytes, each sent once.
func TestHoldPut(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	const size = 8*DefaultBlock + 5
	randomFile(t, filepath.Join(src, "f"), size, 0o644)
	dial, _ := service(t, Config{Root: root})
	hold := new(Hold)
	var seen bytesSeen
	var once sync.Once
	o := Options{Hold: hold, Progress: func(e Event) {
		seen.event(e)
		if e.Kind == EventBytes {
			once.Do(hold.Pause)
		}
	}}
	type result struct {
		sum Summary
		err error
	}
	res := make(chan result, 1)
	go func() {
		sum, err := Put(ctx, dial, []string{filepath.Join(src, "f")}, "f", o)
		res <- result{sum, err}
	}()
	testwait.Until(t, "the put's sender held", 0, hold.Holding)
	if got := seen.get(); got != DefaultBlock {
		t.Errorf("held after %d bytes, want the first block's %d", got, DefaultBlock)
	}
	select {
	case r := <-res:
		t.Fatalf("the put ended while held: %+v %v", r.sum, r.err)
	default:
	}
	if _, err := os.Stat(filepath.Join(root, "f")); err == nil {
		t.Errorf("the file is stored while its put is held")
	}
	hold.Resume()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	sameFile(t, filepath.Join(src, "f"), filepath.Join(root, "f"))
	if r.sum.Sent != size || r.sum.Attempts != 1 {
		t.Errorf("summary %+v: want %d bytes sent once, in one attempt", r.sum, size)
	}
}

// A held put ends when its context does, with the context's error.
func TestHoldCancel(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(src, "f"), 4*DefaultBlock, 0o644)
	dial, _ := service(t, Config{Root: root})
	hold := new(Hold)
	hold.Pause()
	cctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := Put(cctx, dial, []string{filepath.Join(src, "f")}, "f", Options{Hold: hold})
		res <- err
	}()
	testwait.Until(t, "the put's sender held", 0, hold.Holding)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while held: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(root, "f")); err == nil {
		t.Errorf("a cancelled put stored its file")
	}
	if _, err := Get(ctx, dial, []string{"f"}, t.TempDir(), Options{Hold: hold}); !errors.Is(err, ErrHoldGet) {
		t.Errorf("a get with a hold: %v, want ErrHoldGet", err)
	}
}

// A push's caller pauses the source's sender (mHold) and resumes it
// (mGo); the target stores the same bytes, each sent once.
func TestHoldPush(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	const size = 8*DefaultBlock + 5
	randomFile(t, filepath.Join(rootA, "f"), size, 0o644)
	dialB, _ := service(t, Config{Root: rootB})
	dialA, srvA := service(t, Config{Root: rootA, Push: func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error) {
		return dialB(ctx)
	}})
	hold := new(Hold)
	var seen bytesSeen
	var once sync.Once
	// the pause travels to the source while its sender goes on: a rate
	// limit (about 2 s for the file) keeps the file from being all sent
	// before it arrives
	o := Options{Hold: hold, Limit: 4 << 20, Progress: func(e Event) {
		seen.event(e)
		if e.Kind == EventBytes {
			once.Do(hold.Pause)
		}
	}}
	res := make(chan error, 1)
	var sum Summary
	go func() {
		var err error
		sum, err = Push(ctx, dialA, []string{"f"}, "b", "f", Link{}, o)
		res <- err
	}()
	testwait.Until(t, "the push's source held", 0, func() bool { return srvA.Holding() == 1 })
	select {
	case err := <-res:
		t.Fatalf("the push ended while held: %v", err)
	default:
	}
	if got := seen.get(); got >= size {
		t.Errorf("held with all %d bytes sent", got)
	}
	if _, err := os.Stat(filepath.Join(rootB, "f")); err == nil {
		t.Errorf("the file is stored while its push is held")
	}
	hold.Resume()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(rootA, "f"), filepath.Join(rootB, "f"))
	if sum.Sent != size || sum.Attempts != 1 {
		t.Errorf("summary %+v: want %d bytes sent once, in one attempt", sum, size)
	}
	if srvA.Holding() != 0 {
		t.Errorf("the source still holds a push")
	}
}

// The caller's messages during a push: mHold and mGo, empty; anything
// else ends the push.
func TestCallerMessage(t *testing.T) {
	for _, c := range []struct {
		typ  byte
		p    []byte
		hold bool
		ok   bool
	}{{mHold, nil, true, true}, {mGo, nil, false, true}, {mHold, []byte{0}, false, false}, {mData, nil, false, false}, {mBye, nil, false, false}} {
		hold, err := callerMessage(c.typ, c.p)
		if (err == nil) != c.ok || hold != c.hold {
			t.Errorf("callerMessage(%d, %x) = %v, %v", c.typ, c.p, hold, err)
		}
		if err != nil && !errors.Is(err, errFrame) {
			t.Errorf("callerMessage(%d, %x): %v is no framing error", c.typ, c.p, err)
		}
	}
}

func FuzzCallerMessage(f *testing.F) {
	f.Add(byte(mHold), []byte{})
	f.Add(byte(mGo), []byte{1})
	f.Add(byte(mData), []byte{1, 2})
	f.Fuzz(func(t *testing.T, typ byte, p []byte) {
		hold, err := callerMessage(typ, p)
		if err == nil && (len(p) != 0 || hold != (typ == mHold)) {
			t.Fatalf("accepted %d %x as hold=%v", typ, p, hold)
		}
	})
}
