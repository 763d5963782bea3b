package exec

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"sync"

	"github.com/gridlink/gridlink/pki"
)

// The service's side of a stdin link of its own (frame.go, feature
// "stdin-link"): a command whose request asked for it waits for a second
// link that presents its token, and its stdin is that link's bytes.

// stdinLink is a command's stdin link: given out with its token in 'F',
// claimed by the link that presents it ('J').
type stdinLink struct {
	token [tokenSize]byte
	peer  pki.Peer // the command's caller: only it may claim the link

	mu      sync.Mutex
	c       net.Conn      // the claiming link, once claimed
	br      *bufio.Reader // its reader (bytes after 'J' may be in it)
	stopped bool          // the command is done with its stdin
	ready   chan struct{} // closed once claimed or stopped
	done    chan struct{} // closed once the command is done with c
}

// expectStdin gives out a token for a stdin link of the command of peer.
func (s *Service) expectStdin(peer pki.Peer) (*stdinLink, error) {
	l := &stdinLink{peer: peer, ready: make(chan struct{}), done: make(chan struct{})}
	if _, err := rand.Read(l.token[:]); err != nil {
		return nil, err
	}
	s.linksMu.Lock()
	if s.links == nil {
		s.links = make(map[[tokenSize]byte]*stdinLink)
	}
	s.links[l.token] = l
	s.linksMu.Unlock()
	return l, nil
}

// forget ends l: its token is no longer valid, and a link that claimed
// it is closed (the command has ended: what the caller still sends has
// nowhere to go).
func (s *Service) forget(l *stdinLink) {
	s.linksMu.Lock()
	delete(s.links, l.token)
	s.linksMu.Unlock()
	l.stop()
}

// claim hands c, whose 'J' presented l's token, to l's command; false if
// the command is done with its stdin already, or it was claimed before.
func (l *stdinLink) claim(c net.Conn, br *bufio.Reader) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.c != nil {
		return false
	}
	l.c, l.br = c, br
	close(l.ready)
	return true
}

// stop says the command is done with its stdin: an unclaimed l cannot be
// claimed any more, a claimed one's link is closed (which ends a read of
// it that waits).
func (l *stdinLink) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	if l.c != nil {
		l.c.Close()
	} else {
		close(l.ready)
	}
}

// wait waits until l is claimed (its reader) or stopped (nil).
func (l *stdinLink) wait() *bufio.Reader {
	<-l.ready
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil || l.stopped {
		return nil
	}
	return l.br
}

// samePeer says whether a and b are the same caller: one identity key and,
// in a grid with a CA, one end-entity certificate.
func samePeer(a, b pki.Peer) bool {
	if a.ID != b.ID || (a.Chain == nil) != (b.Chain == nil) {
		return false
	}
	return a.Chain == nil || bytes.Equal(a.Chain.EndEntity.Raw, b.Chain.EndEntity.Raw)
}

// joinStdin serves a link whose first frame was 'J' (token): it becomes
// the stdin of the command the token was given out for, if the same
// caller asked for it, until the command is done with it. Otherwise it
// is refused, on both ends in the same words.
func (s *Service) joinStdin(c net.Conn, br *bufio.Reader, peer pki.Peer, who string, token []byte) {
	var t [tokenSize]byte
	copy(t[:], token)
	s.linksMu.Lock()
	l := s.links[t]
	if l != nil && samePeer(l.peer, peer) {
		delete(s.links, t) // once
	}
	s.linksMu.Unlock()
	switch {
	case l == nil:
		s.refuse(c, who, "a stdin link for no command of this node's exec service (it ended, or the token was never given out)", nil)
		return
	case !samePeer(l.peer, peer):
		s.refuse(c, who, fmt.Sprintf("a stdin link for a command that %s runs for another caller", s.node.Name()), nil)
		return
	case !l.claim(c, br):
		// the command is done with its stdin (it ended, or its stdin's
		// link came late): nothing is refused, the link has nowhere to
		// go and is closed (a refusal here could reach the client before
		// the command's exit status, and fail a command that ran)
		return
	}
	<-l.done
}
