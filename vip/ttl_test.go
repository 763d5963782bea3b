package vip

import (
	"testing"
	"testing/synctest"
	"time"
)

// The directory's answers are asked again after routeTTL, in the
// background: an address that no node holds any more stops being sent
// to (ICMP unreachable instead) and stops being accepted as a source
// (once a second lookup, sourceRetry later, says so too).
func TestDirectoryAnswersExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGrid(t, 2, nil)
		a, b := g.nodes[0], g.nodes[1]
		toB := udp4(a.v4, b.v4, "to b", 100)
		a.send(t, toB)
		expect(t, b, toB, "a packet to b")
		fromB := udp4(b.v4, a.v4, "from b", 100)
		b.send(t, fromB)
		expect(t, a, fromB, "a packet from b")

		g.mu.Lock()
		delete(g.dir, b.v4) // b's IPv4 address is no node's any more
		g.mu.Unlock()
		time.Sleep(routeTTL / 2)
		a.send(t, toB)
		expect(t, b, toB, "a packet to b before the answer expired")
		time.Sleep(routeTTL/2 + time.Second)

		// Expired: this one still goes (the lookup runs meanwhile), the
		// next gets an ICMP unreachable.
		a.send(t, toB)
		expect(t, b, toB, "a packet to b while it is looked up again")
		synctest.Wait()
		a.send(t, toB)
		checkICMPv4(t, a.recv(t, "ICMP unreachable once the lookup says no node"), 3, 1, b.v4, a.v4, toB)

		// The same for the source check at a, which asks once more
		// after sourceRetry (b may be claiming it again at another hub).
		b.send(t, fromB)
		expect(t, a, fromB, "a packet from b while its source is looked up again")
		synctest.Wait()
		b.send(t, fromB)
		expect(t, a, fromB, "a packet from b while its source is asked about once more")
		time.Sleep(sourceRetry)
		b.send(t, fromB)
		expect(t, a, fromB, "a packet from b while its source is asked about once more")
		synctest.Wait()
		b.send(t, fromB)
		synctest.Wait()
		if s := a.net.Stats(); s.Drops.SpoofedSource != 1 || len(a.in) != 0 {
			t.Errorf("a: %+v, %d packets arrived; want b's last packet dropped for its source", s.Drops, len(a.in))
		}
	})
}
