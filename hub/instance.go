package hub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"syscall"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A session's process instance (wire/instance.go): drawn when it starts
// and sent in its hellos, so a hub that still holds this process's old
// link (half-dead: the session gave up on it, the hub has not noticed)
// lets the new one replace it at once, where another process with the
// same identity is refused while its attachment answers.

// newInstance draws a process instance: wire.InstanceSize hex digits.
func newInstance() string {
	var b [wire.InstanceSize / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}

// instanceFor is the Instance of a hello to hub: none to a hub that
// closed a link on such a hello before answering (older than
// wire.VersionInstance, whose strict decoder refuses the field).
func (s *Session) instanceFor(hub identity.ID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noInstance[hub] {
		return ""
	}
	return s.instance
}

// helloAnswered records how hub answered a hello that carried inst: a
// link closed before its hello (err, not a refusal) is taken for a hub
// older than wire.VersionInstance, and it is sent no instance from then
// on (the next attempt, a round later, is admitted: the hub judges the
// holder by its liveness alone); a hello of VersionInstance or later
// undoes that.
func (s *Session) helloAnswered(hub identity.ID, inst string, hello *wire.Hello, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case hello != nil && hello.Version >= wire.VersionInstance:
		delete(s.noInstance, hub)
	case inst != "" && err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)):
		if s.noInstance == nil {
			s.noInstance = map[identity.ID]bool{}
		}
		s.noInstance[hub] = true
	}
}
