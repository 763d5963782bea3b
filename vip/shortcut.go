package vip

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// ShortcutDialer is a Dialer that can try a more direct path to a peer.
// While a peer's best connection is routed, the Network tries it in the
// background (at once, then backing off from shortcutMinBackoff to
// shortcutMaxBackoff); a connection it opens is a link like any other
// and, being better, takes over the sending without dropping what is
// queued (IPOP's shortcuts, seed 002).
type ShortcutDialer interface {
	// DialShortcut opens a connection to id by a more direct method than
	// routed (direct, reverse, splice), or fails; ErrNoShortcut: none can apply.
	DialShortcut(ctx context.Context, id identity.ID) (net.Conn, error)
}

// ErrNoShortcut is DialShortcut's answer when no more direct method can
// apply to the peer (none enabled, or every one known to fail): the
// Network asks again only after shortcutMaxBackoff.
var ErrNoShortcut = errors.New("vip: no shortcut can apply to the peer")

const (
	shortcutMinBackoff = 2 * time.Second
	shortcutMaxBackoff = time.Minute
	// shortcutIdle: a peer with no packets either way for this long is
	// idle, and its shortcut tries stop until the next packet to it.
	shortcutIdle = time.Minute
)

// shortcutState is a peer's background tries of a shortcut (guarded by
// n.mu).
type shortcutState struct {
	running bool          // a shortcuts goroutine runs
	idle    bool          // it stopped for lack of traffic: the next packet sent starts it again
	delay   time.Duration // before the next try
	tries   uint64
	lastErr string // the last try's failure
}

// startShortcutsLocked starts the tries of a shortcut to p, when the
// Dialer can and none run.
func (n *Network) startShortcutsLocked(p *peer) {
	sd, ok := n.cfg.Dialer.(ShortcutDialer)
	if !ok || p.shortcut.running || p.down || n.closed {
		return
	}
	p.shortcut.running, p.shortcut.idle = true, false
	n.wg.Add(1)
	go n.shortcuts(p, sd)
}

// activeLocked notes a packet to p: tries stopped for idleness start
// again.
func (s *shortcutState) activeLocked(p *peer) {
	if s.idle {
		if l := p.links[p.conn]; l != nil && l.rank == rankRouted {
			p.n.startShortcutsLocked(p)
		}
	}
}

// shortcuts tries DialShortcut while p's best link is routed: at once,
// then after a delay doubling from shortcutMinBackoff to
// shortcutMaxBackoff (at once the longest after ErrNoShortcut). It stops
// when p is down, sends on a better link, or saw no packets for
// shortcutIdle.
func (n *Network) shortcuts(p *peer, sd ShortcutDialer) {
	defer n.wg.Done()
	lastActive, lastCount := time.Now(), uint64(0)
	for {
		n.mu.Lock()
		delay := p.shortcut.delay
		n.mu.Unlock()
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-p.done:
				t.Stop()
			case <-n.ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		count := p.c.sentPackets.Load() + p.c.recvPackets.Load()
		if count != lastCount {
			lastActive, lastCount = time.Now(), count
		}
		n.mu.Lock()
		cur := p.links[p.conn]
		switch {
		case p.down || n.closed || cur == nil || cur.rank != rankRouted:
			p.shortcut.running = false
			n.mu.Unlock()
			return
		case time.Since(lastActive) >= shortcutIdle:
			p.shortcut.running, p.shortcut.idle = false, true
			n.mu.Unlock()
			return
		}
		p.shortcut.tries++
		n.mu.Unlock()

		ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
		c, err := sd.DialShortcut(ctx, p.id)
		cancel()
		n.mu.Lock()
		if err == nil {
			if n.closed || p.down {
				n.mu.Unlock()
				c.Close()
				continue // and stop
			}
			p.shortcut.lastErr = ""
			n.addLinkLocked(p, c, n.cfg.ID)
			if l := p.links[p.conn]; l != nil && l.rank != rankRouted {
				p.shortcut.running, p.shortcut.delay = false, 0
				n.mu.Unlock()
				return
			}
		} else {
			p.shortcut.lastErr = err.Error()
		}
		switch d := p.shortcut.delay; {
		case errors.Is(err, ErrNoShortcut):
			p.shortcut.delay = shortcutMaxBackoff
		case d == 0:
			p.shortcut.delay = shortcutMinBackoff
		default:
			p.shortcut.delay = min(2*d, shortcutMaxBackoff)
		}
		n.mu.Unlock()
		if err != nil && !errors.Is(err, ErrNoShortcut) && n.ctx.Err() == nil && n.quiet.Allow("shortcut") {
			n.log.Info("vip: no shortcut to a peer yet", "peer", p.id.Short(), "err", err)
		}
	}
}
