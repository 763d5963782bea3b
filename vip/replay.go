package vip

import "sync"

// Replay (issue 35): the connection a peer's packets go on ends (a hub on
// its path died, a path between hubs was cut) some time after the path
// died: the packets written meanwhile are lost with it. An inner TCP
// retransmits them only when its timer, backed off while nothing came
// back, runs out again: seconds after another connection took over. So
// the last TCP segments written on the main connection (replayPackets
// at most) are kept, and when that connection ends they are written
// first on the one that takes over (another link, or the peer dialed
// again), then the queue. A segment that had arrived arrives twice,
// which TCP takes as a duplicate; one that was lost arrives then and
// answers at once. Other protocols are not replayed: a duplicate
// datagram is not theirs to expect.

// replayPackets is the most TCP segments kept for a replay per peer.
const replayPackets = 8

// recent are the TCP segments last written on a peer's main connection,
// oldest first (its writer adds to it, linkEnded takes it).
type recent struct {
	mu   sync.Mutex
	pkts []*pbuf
}

func (r *recent) add(pkt *pbuf) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pkts) >= replayPackets {
		r.pkts[0].release()
		r.pkts = append(r.pkts[:0], r.pkts[1:]...)
	}
	r.pkts = append(r.pkts, pkt)
}

// take returns the segments kept, which the caller owns from now on.
func (r *recent) take() []*pbuf {
	r.mu.Lock()
	defer r.mu.Unlock()
	pkts := r.pkts
	r.pkts = nil
	return pkts
}

// replayLocked takes the segments written on p's main connection, which
// just ended, to be written first on the next (run): after those of an
// earlier replay not written yet, replayPackets at most, the oldest
// dropped.
func (p *peer) replayLocked() {
	p.replay = append(p.replay, p.recent.take()...)
	if extra := len(p.replay) - replayPackets; extra > 0 {
		for _, pkt := range p.replay[:extra] {
			pkt.release()
		}
		p.replay = append(p.replay[:0], p.replay[extra:]...)
	}
}

// dropReplay releases what p kept for a replay (it goes down).
func (p *peer) dropReplay() {
	p.n.mu.Lock()
	pkts := append(p.replay, p.recent.take()...)
	p.replay = nil
	p.n.mu.Unlock()
	for _, pkt := range pkts {
		pkt.release()
	}
}
