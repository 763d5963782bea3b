package direct

import (
	"context"
	"net"
	"time"
)

// Racing TCP connects to one address (ConnectTCP).
const (
	// SYNRetry is how long a connect to a hub waits for its TCP
	// handshake before another attempt starts beside it: a hub whose
	// accept queue a flood keeps full drops SYNs, and the kernel sends a
	// dropped SYN again only after 1 s, then 3 s.
	SYNRetry = 250 * time.Millisecond
	// synAttempts bounds the attempts under way at once.
	synAttempts = 4
)

// ConnectTCP connects to address with dial (nil: a net.Dialer's), racing
// a new attempt every SYNRetry while none has connected, up to
// synAttempts: the first to connect wins and the others are abandoned
// (closed if they connect too). It fails once every attempt started has
// failed, with the last attempt's error; a refused connection thus fails
// at once. ctx bounds it all.
func ConnectTCP(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error), address string) (net.Conn, error) {
	if dial == nil {
		var nd net.Dialer
		dial = nd.DialContext
	}
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, synAttempts)
	launch := func() {
		go func() {
			c, err := dial(ctx, "tcp", address)
			results <- result{c, err}
		}()
	}
	launch()
	launched, pending := 1, 1
	timer := time.NewTimer(SYNRetry)
	defer timer.Stop()
	for {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				cancel()
				go func(n int) { // abandon the others
					for range n {
						if o := <-results; o.err == nil {
							o.c.Close()
						}
					}
				}(pending)
				return r.c, nil
			}
			if pending == 0 {
				cancel()
				return nil, r.err
			}
		case <-timer.C:
			if launched < synAttempts && ctx.Err() == nil {
				launch()
				launched++
				pending++
				timer.Reset(SYNRetry)
			}
		}
	}
}
