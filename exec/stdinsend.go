package exec

import (
	"context"
	"sync"

	"github.com/gridlink/gridlink/agent/control"
)

// stdinSender is the client's side of a stdin link of its own (frame.go,
// "stdin-link"): once the service gave out its token, send opens a
// second link to the service through the caller's agent and sends 'J'
// and stdin's bytes on it (stdinsend_linux.go).
type stdinSender struct {
	c    *control.Client
	node string
	lo   control.LinkOptions
	in   any // the *os.File stdin is

	// old is set by run when the service refused a request that asked
	// for features without saying which it takes: it predates them.
	old bool
	// cut closes the command's connection (set by run before send): a
	// stdin link that fails ends Run with its error.
	cut func()

	ctx    context.Context // the link's: ends with close
	cancel context.CancelFunc

	mu     sync.Mutex
	err    error           // why stdin's link failed
	stream *control.Stream // the link's, once opened
	closed bool
}

func (k *stdinSender) init() *stdinSender {
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

// fail records why stdin's link failed and cuts the command's connection.
func (k *stdinSender) fail(err error) {
	k.mu.Lock()
	if k.err == nil && !k.closed {
		k.err = err
	} else {
		err = nil
	}
	cut := k.cut
	k.mu.Unlock()
	if err != nil && cut != nil {
		cut()
	}
}

// failed is why stdin's link failed, or nil (nil for a nil k).
func (k *stdinSender) failed() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// opened keeps s for close; false if k is closed already (s is closed).
func (k *stdinSender) opened(s *control.Stream) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		s.Close()
		return false
	}
	k.stream = s
	return true
}

// close ends the link once Run is done: the agent cuts it and closes the
// ends it was handed (a copy of stdin left waiting for stdin's next bytes
// ends at them).
func (k *stdinSender) close() {
	k.mu.Lock()
	k.closed = true
	s := k.stream
	k.mu.Unlock()
	k.cancel()
	if s != nil {
		s.Close()
	}
}
