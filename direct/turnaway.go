package direct

import (
	"fmt"
	"net"
	"time"
)

// StaleAfter is how long a newcomer may have been silent since it
// connected (waiting in the kernel's accept queue) and still be admitted
// to a full Gate (TurnAway): a peer sends its first message with the
// handshake's last ACK, microseconds later.
const StaleAfter = 20 * time.Millisecond

// TurnAway closes a newcomer the gate is full for, and says so, if its
// peer has not spoken (Spoke) and has been silent for StaleAfter or more
// (SilentFor): it waited in the kernel's accept queue while the listener
// was busy, and a peer that means to connect sends its first message at
// once, so it would be the first idle one to shed. Admitting it would
// cost a goroutine, a deadline and reads, and shed a connection the gate
// holds, which a flooder dials again. It returns nil, and leaves c alone, when Spoke is nil or the gate has
// room.
func (g *Gate) TurnAway(c net.Conn) *Shed {
	if g.Spoke == nil {
		return nil
	}
	max, _ := g.bounds()
	g.mu.Lock()
	n := g.waiting.Len() + g.greeted.Len()
	g.mu.Unlock()
	if n < max || g.Spoke(c) {
		return nil
	}
	silent, ok := SilentFor(c)
	if !ok || silent < StaleAfter {
		return nil
	}
	g.mu.Lock()
	g.shed++
	g.mu.Unlock()
	abort(c)
	return &Shed{From: c.RemoteAddr().String(), Reason: fmt.Sprintf("turned away: silent for %v since it connected, %d handshakes pending (limit %d)", silent, n, max)}
}
