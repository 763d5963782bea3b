package xfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// service runs a transfer service on 127.0.0.1 serving root, and returns
// a dialer for it.
func service(t *testing.T, cfg Config) (Dialer, *Server) {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
	addr := l.Addr().String()
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, s
}

// randomFile writes size random bytes to name with mode and an mtime in
// the past, and returns the bytes.
func randomFile(t *testing.T, name string, size int, mode os.FileMode) []byte {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
	mt := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := os.Chtimes(name, mt, mt); err != nil {
		t.Fatal(err)
	}
	return b
}

// sameFile fails unless got has want's bytes, mode and mtime.
func sameFile(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s (%d and %d bytes)", got, want, len(b), len(a))
	}
	fa, _ := os.Stat(want)
	fb, _ := os.Stat(got)
	if fa.Mode() != fb.Mode() {
		t.Errorf("%s: mode %v, want %v", got, fb.Mode(), fa.Mode())
	}
	if !fa.ModTime().Equal(fb.ModTime()) {
		t.Errorf("%s: mtime %v, want %v", got, fb.ModTime(), fa.ModTime())
	}
}

// dropAfter is a dialer whose first connection breaks after n bytes
// written or read; later ones work.
func dropAfter(d Dialer, n int64) Dialer {
	var first atomic.Bool
	first.Store(true)
	return func(ctx context.Context) (net.Conn, error) {
		c, err := d(ctx)
		if err != nil || !first.Swap(false) {
			return c, err
		}
		b := &breaking{Conn: c}
		b.left.Store(n)
		return b, nil
	}
}

type breaking struct {
	net.Conn
	left atomic.Int64 // bytes left to read or write
}

func (b *breaking) Read(p []byte) (int, error) {
	left := b.left.Load()
	if left <= 0 {
		b.Conn.Close()
		return 0, net.ErrClosed
	}
	n, err := b.Conn.Read(p[:min(int64(len(p)), left)])
	b.left.Add(-int64(n))
	return n, err
}

func (b *breaking) Write(p []byte) (int, error) {
	left := b.left.Add(-int64(len(p)))
	if left < 0 {
		b.Conn.Close()
		return 0, net.ErrClosed
	}
	return b.Conn.Write(p)
}
