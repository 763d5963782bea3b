package direct

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A connect whose SYN is lost (a flooded hub's full accept queue drops it)
// gets a second attempt after SYNRetry instead of the kernel's 1 s; a
// refused one fails at once; the losers are closed.
func TestConnectTCPRaces(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var attempts atomic.Int32
	lost := func(ctx context.Context, network, address string) (net.Conn, error) {
		if attempts.Add(1) == 1 { // the first SYN is dropped: nothing until given up
			<-ctx.Done()
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	start := time.Now()
	c, err := ConnectTCP(context.Background(), lost, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if took := time.Since(start); took < SYNRetry || took > SYNRetry+500*time.Millisecond {
		t.Errorf("connected after %v, want about %v", took, SYNRetry)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}

	refused := func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	start = time.Now()
	if _, err := ConnectTCP(context.Background(), refused, "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refused: %v", err)
	}
	if took := time.Since(start); took > SYNRetry/2 {
		t.Errorf("a refused connect took %v", took)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*SYNRetry/2)
	defer cancel()
	black := func(ctx context.Context, network, address string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if _, err := ConnectTCP(ctx, black, "192.0.2.1:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("black hole: %v", err)
	}
}
