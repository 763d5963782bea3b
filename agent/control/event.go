package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Event lines: the framing of the agent's stream requests before their
// raw bytes (stream.go) and of the agent's services to other nodes: the exit
// service's request and answer and the service directory (package agent).
//
//	EVENT = a JSON object (Event) on one line, at most MaxEventLine bytes
//	        including the terminating '\n'
//
// A reader takes the line byte by byte, so nothing after the '\n' (the
// raw bytes that follow) is consumed.
const MaxEventLine = 1024

// Event is one event line; which fields are set says what happened.
type Event struct {
	Bound string `json:"bound,omitempty"` // a listener's virtual address (bind, expose)
	Peer  string `json:"peer,omitempty"`  // the accepted peer (bind), the address an exit reached
	Dial  string `json:"dial,omitempty"`  // exit request: HOST:PORT to dial
	// Service is a directory request: the name of an exposed service.
	Service string `json:"service,omitempty"`
	// Done: a stream handed to the agent has ended (handoff.go).
	Done bool `json:"done,omitempty"`
	// Ready: the virtual network runs on a handed device (vip.go).
	Ready bool   `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"` // error kind (see Kind*)
}

// Error kinds: why a stream request or an exit's dial failed, for callers
// that must tell them apart (SOCKS reply codes).
const (
	KindBadRequest  = "bad-request"  // malformed request or address
	KindUnknownName = "unknown-name" // no node of that name is attached to any hub
	KindRefused     = "refused"      // nothing listens on the port
	KindUnreachable = "unreachable"  // every method to set up a connection failed
	KindNotAllowed  = "not-allowed"  // the far side's policy refuses (link options, exit)
	KindTimeout     = "timeout"
	KindFailed      = "failed" // anything else
)

// ReadEvent reads one event line.
func ReadEvent(r io.Reader) (Event, error) {
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Event{}, fmt.Errorf("agent: event line: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
		if len(line) >= MaxEventLine {
			return Event{}, fmt.Errorf("agent: event line longer than %d bytes", MaxEventLine)
		}
	}
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Event{}, fmt.Errorf("agent: bad event line %q: %w", clip(line), err)
	}
	return ev, nil
}

// AppendEvent encodes an event line; fields too long for one are clipped.
func AppendEvent(b []byte, ev Event) []byte {
	for {
		line, _ := json.Marshal(ev)
		if len(line) < MaxEventLine {
			return append(append(b, line...), '\n')
		}
		ev.Error = ev.Error[:len(ev.Error)/2]
		if len(ev.Error) == 0 {
			ev = Event{Error: "event too long", Kind: KindFailed}
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// StreamError is a failed stream request: what went wrong and its kind.
type StreamError struct {
	Kind string `json:"kind"`
	Msg  string `json:"error"`
}

func (e *StreamError) Error() string { return e.Msg }
