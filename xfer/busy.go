package xfer

import (
	"sync"
	"time"
)

// busySet is the set of files being received, so that two sessions never
// write one file: after a dropped connection the resumed session may start
// before the service has noticed that the old one is gone. Over a
// resumable link the old one may wait for its connection to come back
// (up to the link's resume timeout) when its client was killed: a resumed
// copy (cp --resume) of the same user takes its files over, ending it.
type busySet struct {
	mu sync.Mutex
	m  map[string]*holder
}

// holder is a session writing a file.
type holder struct {
	done  chan struct{} // closed on release
	owner string        // the session's user
	stop  func()        // ends the session (nil: it cannot be)
}

// busyWait is how long a session waits for another to let go of a file.
const busyWait = 15 * time.Second

// takeoverGrace is how long a resumed session lets a holder of the same
// owner finish on its own before ending it: a holder whose client was cut
// still stores what reached it before the cut (ending it at once threw
// that away, and the resumed copy sent it again), and one waiting on a
// resumable link for its client, which is not coming back, is ended.
const takeoverGrace = time.Second

// acquire takes name for owner, waiting up to busyWait for whoever holds
// it; with takeover, a holder of the same owner that has not let go
// within takeoverGrace is ended. stop ends the acquiring session, should
// another take its file over.
func (b *busySet) acquire(name, owner string, takeover bool, stop func()) bool {
	deadline := time.NewTimer(busyWait)
	defer deadline.Stop()
	var grace <-chan time.Time // set while waiting out a holder of the same owner
	graceOver := false
	for {
		b.mu.Lock()
		if b.m == nil {
			b.m = map[string]*holder{}
		}
		h, held := b.m[name]
		if !held {
			b.m[name] = &holder{done: make(chan struct{}), owner: owner, stop: stop}
			b.mu.Unlock()
			return true
		}
		var end func()
		ours := takeover && h.owner == owner && h.stop != nil
		if ours && grace == nil {
			t := time.NewTimer(takeoverGrace)
			defer t.Stop()
			grace = t.C
		} else if ours && graceOver {
			end, h.stop = h.stop, nil
		}
		b.mu.Unlock()
		if end != nil {
			end()
		}
		select {
		case <-h.done:
		case <-grace:
			graceOver = true // end the holder next round
		case <-deadline.C:
			return false
		}
	}
}

func (b *busySet) release(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.m[name]; ok {
		close(h.done)
		delete(b.m, name)
	}
}
