package vip

import (
	"context"
	"slices"
	"time"
)

// Dialing a peer (issue 35). Its first dial is one attempt: when it
// fails, the peer goes down for dialRetry, its packets dropped. A peer
// whose connections all ended after it had one (a hub on a routed path
// died, a path between hubs was cut) is dialed again while packets go
// to it, its queue kept: an inner TCP backing off its retransmissions
// sends one now and then, and one lost to each failed dial left a flow
// stalled long after a path existed. One attempt can take long (the
// method race waits for a direct connect's timeout even when the routed
// attempt failed at once: no route yet), so attempts overlap: a new one
// starts redialMin after the first, the pause doubling to redialMax,
// at most redialInFlight at once (the oldest gives way to a new one);
// the first connection up ends the dialing, the others given up.
const (
	// redialMin and redialMax bound the pause between the attempts to
	// dial a peer whose connections all ended (doubling from
	// redialMin): a path that comes back (a hub restarted, a route found
	// around a lost one) is found within redialMax and one setup.
	redialMin = 100 * time.Millisecond
	redialMax = time.Second
	// redialInFlight is the most attempts under way at once.
	redialInFlight = 3
	// redialIdle: a peer whose connections all ended is dialed again, its
	// packets queued meanwhile, as long as packets went to it within
	// redialIdle; then it goes down (its queue dropped).
	redialIdle = time.Minute
)

// dialLocked starts dialing p unless it is being dialed.
func (n *Network) dialLocked(p *peer) {
	if p.dialing {
		return
	}
	p.dialing = true
	n.wg.Add(1)
	go n.dial(p)
}

// dial opens a connection to the peer: its first (one attempt), or one
// after its connections all ended (attempts overlapping, see above)
// until one is up, the peer dialed this node, or no packet went to it
// for redialIdle.
func (n *Network) dial(p *peer) {
	defer n.wg.Done()
	n.mu.Lock()
	again := p.wasUp
	n.mu.Unlock()
	began := time.Now()
	type attempt struct {
		cancel context.CancelFunc
		err    error
	}
	ended := make(chan *attempt)
	done := make(chan struct{})
	defer close(done)
	var under []*attempt // under way, oldest first
	defer func() {
		for _, a := range under {
			a.cancel() // one is up: the rest are not needed
		}
	}()
	start := func() {
		if len(under) >= redialInFlight {
			under[0].cancel() // the oldest gives way
			under = under[1:]
		}
		ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
		a := &attempt{cancel: cancel}
		under = append(under, a)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			a.err = n.dialOnce(ctx, p)
			cancel()
			select {
			case ended <- a:
			case <-done:
			}
		}()
	}
	start()
	delay := redialMin
	next := time.NewTimer(delay)
	defer next.Stop()
	for {
		due := next.C
		if !again {
			due = nil
		}
		select {
		case <-p.done:
			return
		case <-n.ctx.Done():
			return
		case <-due:
			p.c.redials.Add(1)
			start()
			delay = min(2*delay, redialMax)
			next.Reset(delay)
		case a := <-ended:
			if i := slices.Index(under, a); i >= 0 {
				under = slices.Delete(under, i, i+1)
			}
			n.mu.Lock()
			switch {
			case len(p.links) > 0 || p.down: // up (or the peer dialed this node meanwhile), or gone
				p.dialing = false
				up := !p.down
				n.mu.Unlock()
				if again && up && n.ctx.Err() == nil {
					n.log.Info("vip: a peer's connection is back", "peer", p.id.Short(), "after", time.Since(began).Round(time.Millisecond))
				}
				return
			case a.err == nil: // up, and ended already: its end found this dial under way
				again = true
				n.mu.Unlock()
				continue
			case !again || n.closed || time.Since(p.lastSent) >= redialIdle:
				if len(under) > 0 {
					break // the others may still get through
				}
				p.dialing = false
				hold := dialRetry
				if again {
					hold = 0
				}
				n.mu.Unlock()
				n.peerDown(p, hold, a.err)
				return
			}
			n.mu.Unlock()
			if n.ctx.Err() == nil && n.quiet.Allow("dial") {
				n.log.Warn("vip: dialing a peer", "peer", p.id.Short(), "again", again, "err", a.err)
			}
		}
	}
}

// dialOnce makes one attempt to dial p; a connection it opens becomes a
// link of p (or is closed when p is gone).
func (n *Network) dialOnce(ctx context.Context, p *peer) error {
	c, err := n.cfg.Dialer.DialPeer(ctx, p.id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed || p.down {
		n.mu.Unlock()
		c.Close()
		return nil
	}
	n.addLinkLocked(p, c, n.cfg.ID)
	n.mu.Unlock()
	return nil
}
