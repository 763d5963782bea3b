package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// 500 clients ask one agent for a stream at once, its method cache cold:
// every setup succeeds (the agent sets up a bounded number at a time and
// queues the rest) and carries its bytes.
func TestManyConcurrentSetups(t *testing.T) {
	const n = 500
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	_, cb := startAgent(t, "beta", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exposeEcho(ctx, t, cb, 7000)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ca.Connect(ctx, control.ConnectRequest{Addr: "beta:7000"})
			if err != nil {
				errs <- fmt.Errorf("setup %d: %w", i, err)
				return
			}
			defer c.Close()
			msg := []byte(fmt.Sprintf("hello %d", i))
			back := make([]byte, len(msg))
			if _, err := c.Write(msg); err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			if _, err := io.ReadFull(c, back); err != nil || string(back) != string(msg) {
				errs <- fmt.Errorf("stream %d: %q, %v", i, back, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed < 10 {
			t.Error(err)
		}
		failed++
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent setups failed", failed, n)
	}
}

// Setups beyond MaxSetups wait in the order they came; one whose context
// ends leaves the queue without a turn, and a released turn passes on.
func TestSetupQueueOrder(t *testing.T) {
	var q setupQueue
	ctx := context.Background()
	for i := 0; i < MaxSetups; i++ {
		if err := q.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	order := make(chan int, 3)
	queued := func(n int) {
		for {
			q.mu.Lock()
			l := q.waiting.Len()
			q.mu.Unlock()
			if l == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error)
	for i := 0; i < 3; i++ {
		go func() {
			c := ctx
			if i == 1 {
				c = cctx
			}
			if err := q.acquire(c); err != nil {
				gone <- err
				return
			}
			order <- i
		}()
		queued(i + 1)
	}
	cancel()
	if err := <-gone; err != context.Canceled {
		t.Errorf("the cancelled waiter: %v", err)
	}
	queued(2)
	q.release()
	a := <-order
	q.release()
	if b := <-order; a != 0 || b != 2 {
		t.Errorf("turns went to %d, %d; want 0, 2", a, b)
	}
	q.mu.Lock()
	if q.running != MaxSetups || q.waiting.Len() != 0 {
		t.Errorf("running %d, waiting %d", q.running, q.waiting.Len())
	}
	q.mu.Unlock()
}

// exposeEcho publishes, through client c's agent, a local TCP echo server
// as the agent's overlay port, until the test ends.
func exposeEcho(ctx context.Context, t *testing.T, c *control.Client, port uint16) {
	t.Helper()
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { el.Close() })
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	ex, err := c.Expose(ctx, control.ExposeRequest{Local: el.Addr().String(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
}
