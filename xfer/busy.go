package xfer

import (
	"sync"
	"time"
)

// busySet is the set of files being received, so that two sessions never
// write one file: after a dropped connection the resumed session may start
// before the service has noticed that the old one is gone.
type busySet struct {
	mu sync.Mutex
	m  map[string]chan struct{} // closed on release
}

// busyWait is how long a session waits for another to let go of a file.
const busyWait = 15 * time.Second

// acquire takes name, waiting up to busyWait for whoever holds it.
func (b *busySet) acquire(name string) bool {
	deadline := time.NewTimer(busyWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if b.m == nil {
			b.m = map[string]chan struct{}{}
		}
		ch, held := b.m[name]
		if !held {
			b.m[name] = make(chan struct{})
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

func (b *busySet) release(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.m[name]; ok {
		close(ch)
		delete(b.m, name)
	}
}
