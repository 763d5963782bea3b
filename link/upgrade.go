package link

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/vconn"
)

// Live path upgrade (Options.Upgrade): a resumable link that the dialler
// set up by a method other than direct looks, while it runs, for a
// connection to the same peer and port by a more direct method (direct,
// then reverse, then splice, then routed: vconn's ranks). One set up, it
// joins the link (Join), and the less direct connections close: what they
// carried unacknowledged goes again over the new one, nothing lost. The
// first try comes upgradeFirst after the link opens, the next ones
// upgradeFirst apart, doubling while none can be set up to upgradeMax;
// an upgrade starts over at upgradeFirst, for the next better method.
// Each switch is recorded (Stats.Switches); the agent's status shows the
// link's virtual connections and their methods.

const (
	upgradeFirst = time.Second
	upgradeMax   = 30 * time.Second
	upgradeSetup = 10 * time.Second // bounds one try
)

// methodOrder is vconn's methods from the most direct.
var methodOrder = []vconn.Method{vconn.Direct, vconn.Reverse, vconn.Splice, vconn.Routed}

// PathSwitch is a live path upgrade: when the link moved from one method
// to another.
type PathSwitch struct {
	From, To vconn.Method
	At       time.Time
}

// upgrader is a link's search for more direct connections.
type upgrader struct {
	dial func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error)
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu       sync.Mutex
	switches []PathSwitch
	ended    bool // the search is over (direct, or the link failed or closed)
}

// startUpgrade begins looking for more direct connections, unless the
// link is direct already or not resumable.
func (c *Conn) startUpgrade(dial func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error)) {
	if c.rs == nil || c.first.Method() == vconn.Direct {
		return
	}
	u := &upgrader{dial: dial, stop: make(chan struct{})}
	c.mu.Lock()
	c.up = u
	c.mu.Unlock()
	u.wg.Add(1)
	go c.upgradeLoop(u)
}

// halt ends the search and waits for it.
func (u *upgrader) halt() {
	if u == nil {
		return
	}
	u.once.Do(func() { close(u.stop) })
	u.wg.Wait()
}

func (c *Conn) upgradeLoop(u *upgrader) {
	defer u.wg.Done()
	defer func() {
		u.mu.Lock()
		u.ended = true
		u.mu.Unlock()
	}()
	retry := backoff.ExponentialBackOff{InitialInterval: upgradeFirst, Multiplier: 2, MaxInterval: upgradeMax}
	wait := retry.NextBackOff()
	for {
		select {
		case <-u.stop:
			return
		case <-time.After(wait):
		}
		if c.rs.failure() != nil {
			return
		}
		cur := c.bestMethod()
		i := slices.Index(methodOrder, cur)
		if i <= 0 {
			if cur == vconn.Direct {
				return
			}
			wait = retry.NextBackOff()
			continue
		}
		better := methodOrder[:i]
		ctx, cancel := context.WithTimeout(context.Background(), upgradeSetup)
		go func() { // Close ends a try under way
			select {
			case <-u.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		vc, err := u.dial(ctx, better)
		if err == nil {
			err = c.Join(ctx, vc)
		}
		cancel()
		if err != nil {
			wait = retry.NextBackOff()
			continue
		}
		retry.Reset()
		wait = retry.NextBackOff()
		to := vc.Method()
		// recorded as vc joins, so that the switches and Path (from the
		// live connections) agree
		u.mu.Lock()
		u.switches = append(u.switches, PathSwitch{From: cur, To: to, At: time.Now()})
		u.mu.Unlock()
		for _, old := range c.liveConns() {
			if old != vc && slices.Index(methodOrder, old.Method()) > slices.Index(methodOrder, to) {
				_ = old.Close() // what it carried goes again over vc
			}
		}
	}
}

// liveConns are the virtual connections the link carries blocks on now.
func (c *Conn) liveConns() []*vconn.Conn {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	var out []*vconn.Conn
	for _, d := range c.rs.live {
		if vc, ok := d.c.(*vconn.Conn); ok {
			out = append(out, vc)
		}
	}
	return out
}

// bestMethod is the most direct method among the link's connections now
// (routed while it has none).
func (c *Conn) bestMethod() vconn.Method {
	best := vconn.Routed
	for _, vc := range c.liveConns() {
		if slices.Index(methodOrder, vc.Method()) < slices.Index(methodOrder, best) {
			best = vc.Method()
		}
	}
	return best
}

// Path is the most direct method among the link's connections now; a
// link that is not resumable keeps its first connection's.
func (c *Conn) Path() vconn.Method {
	if c.rs == nil {
		return c.Method()
	}
	return c.bestMethod()
}

// Upgrading says whether the link looks for a more direct connection
// now (Options.Upgrade on a resumable link that is not direct yet).
func (c *Conn) Upgrading() bool {
	c.mu.Lock()
	u := c.up
	c.mu.Unlock()
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return !u.ended
}
