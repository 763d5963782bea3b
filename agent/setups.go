package agent

import (
	"container/list"
	"context"
	"sync"
)

// MaxSetups is how many connection setups (a stream request's link, a
// ping's connection) an agent runs at once; the others wait their turn in
// the order they came, each under its own context. Hundreds of setups at
// once (500 clients starting together) would race every method each,
// overflow the far side's queue of routed circuits and the host's
// ephemeral ports, and time out; in turns they all succeed.
const MaxSetups = 64

// setupQueue is a first-come, first-served semaphore.
type setupQueue struct {
	mu      sync.Mutex
	running int
	waiting list.List // of chan struct{}, closed when its turn comes
}

// acquire waits for a turn; release must follow a nil return.
func (q *setupQueue) acquire(ctx context.Context) error {
	q.mu.Lock()
	if q.running < MaxSetups && q.waiting.Len() == 0 {
		q.running++
		q.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	e := q.waiting.PushBack(turn)
	q.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		select {
		case <-turn: // the turn came meanwhile: pass it on
			q.mu.Unlock()
			q.release()
		default:
			q.waiting.Remove(e)
			q.mu.Unlock()
		}
		return ctx.Err()
	}
}

// release ends a turn and gives it to the first waiter.
func (q *setupQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.waiting.Front(); e != nil {
		q.waiting.Remove(e)
		close(e.Value.(chan struct{})) // running stays: the turn passes
		return
	}
	q.running--
}
