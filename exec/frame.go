package exec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Port is the virtual port of the exec service; proxy restrictions call
// it "exec" (exec or exec@NODEID), as /etc/services calls rexec's 512.
const Port = 512

// The exec protocol runs on a link to Port, after the overlay handshake
// (which proved the caller). Everything travels in frames:
//
//	frame:
//	  type    1 byte   what the frame carries (below)
//	  length  uint32   big-endian, the payload's bytes; per type bounds below
//	  payload
//
// From the client:
//
//	'Q' request   the first frame, once: a JSON Request (fields as tagged,
//	              unknown fields refused), 2..MaxRequest bytes
//	'i' stdin     1..MaxData bytes for the command's standard input, within
//	              the credit the service granted (Window at first)
//	'I' stdin EOF 0 bytes: standard input ended (the command reads EOF; on a
//	              pty, the terminal's end-of-file character)
//	'S' signal    1 byte: the signal number, SIGHUP (1), SIGINT (2) or
//	              SIGTERM (15), for the command's process group
//	'W' window    4 bytes: rows and columns, uint16 each, 1..65535 (pty only)
//	'J' stdin link 16 bytes: a token of the service's 'F' frame. The first
//	              and only frame of a second link to Port, sent instead
//	              of 'Q' (see "Stdin on a link of its own" below)
//
// From the service:
//
//	'F' features  1 or 17 bytes, only to a request that listed features
//	              (Request.Features), before 'A' or 'R': a flags byte, bit
//	              0 (featureStdinLink) set if stdin goes on a link of its
//	              own, the other bits 0; with bit 0, the 16-byte token
//	              the stdin link presents (random, for this command only)
//	'A' started   0 bytes: the command runs (after this, 'o', 'e', 'C')
//	'R' refused   1..MaxReason bytes of UTF-8 without control characters:
//	              why the command does not run (the service's log says the
//	              same); the service closes after it
//	'o' stdout    1..MaxData bytes of the command's standard output (on a
//	              pty: the terminal's output)
//	'e' stderr    1..MaxData bytes of its standard error
//	'C' credit    4 bytes, uint32 1..Window: so many more stdin bytes may be
//	              sent (what the command has taken; granted in batches of
//	              a quarter of the window, or all once it has taken all)
//	'X' exit      2 bytes: 0 and the exit code (0..255), or 1 and the
//	              signal number (1..64) that killed the command; the last
//	              frame, after all of stdout and stderr
//
// Stdin on a link of its own (feature "stdin-link"): a client whose
// stdin is bulk data (a pipe or a file) lists "stdin-link" in its
// request's features. A service that knows it answers 'F' with bit 0 and
// a token before 'A'; the client then opens a second link to Port, sends
// 'J' with the token and after it stdin's bytes as they are, no frames,
// until it half-closes the link: that is stdin's end. The service writes
// the link's bytes into the command's stdin (the link's own flow control
// paces them: no 'C' credit), answers nothing on it, and closes it when
// the command has ended. On the first link the client then sends no 'i'
// or 'I' (a service refuses them there). A 'J' whose token the service
// did not give out, or that comes from another peer than the command's
// (its certificate or node), is refused with 'R' on that link and
// logged. A service that predates features refuses the request (an
// unknown field) with 'R' and no 'F': the client asks again, on a new
// link, without features (one round trip more, against old services
// only; their log shows the first refusal). The client side is where the
// agent takes descriptors: the second link's local end is a pipe handed
// to the caller's agent as gridlink nc hands its stdin, so the agent
// forwards stdin as it forwards nc's.
//
// A decoder refuses any other type, a frame out of its direction, a
// length out of bounds, or a payload that breaks its type's rules
// (ProtocolError); so does a peer that sends stdin beyond its credit, or
// anything before 'Q' or after 'X'.
const (
	frameHeader = 5
	// MaxData bounds a data frame's payload.
	MaxData = 256 << 10
	// MaxRequest bounds the request's JSON.
	MaxRequest = 64 << 10
	// MaxReason bounds a refusal's reason.
	MaxReason = 1024
	// Window is the stdin credit a client starts with: bytes it may send
	// before the service has taken any.
	Window = 4 << 20
	// creditBatch is how much stdin the command takes before the service
	// grants it back (or less, once the command has taken all it was sent).
	creditBatch = Window / 4
	// tokenSize is a stdin link's token ('F', 'J').
	tokenSize = 16
	// featureStdinLink is 'F''s flag for a stdin link of its own.
	featureStdinLink = 1 << 0
	// FeatureStdinLink is the request's name for it (Request.Features).
	FeatureStdinLink = "stdin-link"
)

// Frame types.
const (
	FrameRequest  = 'Q'
	FrameStdin    = 'i'
	FrameStdinEOF = 'I'
	FrameSignal   = 'S'
	FrameWindow   = 'W'
	FrameJoin     = 'J'

	FrameFeatures = 'F'
	FrameStarted  = 'A'
	FrameRefused  = 'R'
	FrameStdout   = 'o'
	FrameStderr   = 'e'
	FrameCredit   = 'C'
	FrameExit     = 'X'
)

// Signals a client may send: the numbers are Linux's (and POSIX's usual).
const (
	SIGHUP  = 1
	SIGINT  = 2
	SIGTERM = 15
)

// Frame is one decoded frame.
type Frame struct {
	Type byte
	Data []byte
}

// ProtocolError is a frame that breaks the protocol: what was wrong and,
// when known, the frame type.
type ProtocolError struct {
	Type byte
	Msg  string
}

func (e *ProtocolError) Error() string {
	if e.Type == 0 {
		return "exec protocol: " + e.Msg
	}
	return fmt.Sprintf("exec protocol: frame %q: %s", e.Type, e.Msg)
}

// Side says which end sent a frame.
type Side int

// The two ends.
const (
	FromClient Side = iota
	FromService
)

// bounds are a frame type's payload bounds per sending side.
type bounds struct {
	side     Side
	min, max int
}

var frameBounds = map[byte]bounds{
	FrameRequest:  {FromClient, 2, MaxRequest},
	FrameStdin:    {FromClient, 1, MaxData},
	FrameStdinEOF: {FromClient, 0, 0},
	FrameSignal:   {FromClient, 1, 1},
	FrameWindow:   {FromClient, 4, 4},
	FrameJoin:     {FromClient, tokenSize, tokenSize},
	FrameFeatures: {FromService, 1, 1 + tokenSize},
	FrameStarted:  {FromService, 0, 0},
	FrameRefused:  {FromService, 1, MaxReason},
	FrameStdout:   {FromService, 1, MaxData},
	FrameStderr:   {FromService, 1, MaxData},
	FrameCredit:   {FromService, 4, 4},
	FrameExit:     {FromService, 2, 2},
}

// putHeader writes a frame header for typ and n payload bytes into b
// (frameHeader bytes): a frame built in place, its payload read straight
// after the header, goes out in one write without a copy.
func putHeader(b []byte, typ byte, n int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:frameHeader], uint32(n))
}

// AppendFrame appends a frame of type typ with payload data to b.
func AppendFrame(b []byte, typ byte, data []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// ReadFrame reads one frame sent by side from r and checks it (type,
// direction, length, payload rules). An EOF before the first byte is
// io.EOF; any other fault a *ProtocolError or the read's error.
func ReadFrame(r io.Reader, side Side) (Frame, error) { return readFrame(r, side, nil) }

// readFrame is ReadFrame with the payload read into buf(n) when buf is
// not nil and the frame carries data (stdin, stdout, stderr): a buffer
// of n bytes the caller reuses, so that bulk data is neither allocated
// nor zeroed per frame. Every check is ReadFrame's.
func readFrame(r io.Reader, side Side, buf func(n int) []byte) (Frame, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return Frame{}, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return Frame{}, fmt.Errorf("exec protocol: frame header cut short: %w", err)
	}
	f := Frame{Type: h[0]}
	bd, ok := frameBounds[f.Type]
	if !ok {
		return f, &ProtocolError{Type: f.Type, Msg: "unknown frame type"}
	}
	if bd.side != side {
		return f, &ProtocolError{Type: f.Type, Msg: "sent by the wrong end"}
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n < uint32(bd.min) || n > uint32(bd.max) {
		return f, &ProtocolError{Type: f.Type, Msg: fmt.Sprintf("%d bytes, want %d..%d", n, bd.min, bd.max)}
	}
	if buf != nil && n > 0 && (f.Type == FrameStdin || f.Type == FrameStdout || f.Type == FrameStderr) {
		f.Data = buf(int(n))[:n]
	} else {
		f.Data = make([]byte, n)
	}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return f, fmt.Errorf("exec protocol: frame %q cut short: %w", f.Type, err)
	}
	if err := checkPayload(f); err != nil {
		return f, err
	}
	return f, nil
}

// checkPayload applies a frame type's payload rules (lengths are checked).
func checkPayload(f Frame) error {
	bad := func(format string, args ...any) error {
		return &ProtocolError{Type: f.Type, Msg: fmt.Sprintf(format, args...)}
	}
	switch f.Type {
	case FrameSignal:
		switch f.Data[0] {
		case SIGHUP, SIGINT, SIGTERM:
		default:
			return bad("signal %d not forwarded (HUP, INT and TERM are)", f.Data[0])
		}
	case FrameWindow:
		rows, cols := binary.BigEndian.Uint16(f.Data), binary.BigEndian.Uint16(f.Data[2:])
		if rows == 0 || cols == 0 {
			return bad("window of %d rows and %d columns", rows, cols)
		}
	case FrameFeatures:
		switch fl := f.Data[0]; {
		case fl&^featureStdinLink != 0:
			return bad("unknown feature flags %#x", fl)
		case fl&featureStdinLink != 0 && len(f.Data) != 1+tokenSize:
			return bad("a stdin link without its %d-byte token", tokenSize)
		case fl&featureStdinLink == 0 && len(f.Data) != 1:
			return bad("a token without a stdin link")
		}
	case FrameRefused:
		if _, err := checkText(f.Data); err != nil {
			return bad("reason: %v", err)
		}
	case FrameCredit:
		if c := binary.BigEndian.Uint32(f.Data); c == 0 || c > Window {
			return bad("credit of %d bytes, want 1..%d", c, Window)
		}
	case FrameExit:
		switch kind, v := f.Data[0], f.Data[1]; {
		case kind == 0:
		case kind == 1 && v >= 1 && v <= 64:
		default:
			return bad("exit status kind %d value %d", kind, v)
		}
	}
	return nil
}

// checkText checks a reason: UTF-8 without control characters.
func checkText(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", errors.New("not UTF-8")
	}
	for _, r := range string(b) {
		if r < ' ' || r == 0x7f {
			return "", errors.New("control characters")
		}
	}
	return string(b), nil
}

// cleanReason makes s fit a refusal: valid UTF-8, no control characters,
// at most MaxReason bytes, never empty.
func cleanReason(s string) string {
	s = string(bytes.ToValidUTF8([]byte(s), []byte("?")))
	s = string(bytes.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, []byte(s)))
	for len(s) > MaxReason {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	if s == "" {
		s = "refused"
	}
	return s
}

// Status is how a command ended: its exit code, or the signal that
// killed it.
type Status struct {
	Code   int // 0..255 when Signal is 0
	Signal int // 1..64: killed by this signal
}

// ExitCode is the status as a shell (and ssh) reports it: the code, or
// 128+N for a command killed by signal N.
func (s Status) ExitCode() int {
	if s.Signal != 0 {
		return 128 + s.Signal
	}
	return s.Code
}

func (s Status) String() string {
	if s.Signal != 0 {
		return fmt.Sprintf("killed by signal %d", s.Signal)
	}
	return fmt.Sprintf("exit %d", s.Code)
}

func exitPayload(s Status) []byte {
	if s.Signal != 0 {
		return []byte{1, byte(s.Signal)}
	}
	return []byte{0, byte(s.Code)}
}

func parseExit(d []byte) Status {
	if d[0] == 1 {
		return Status{Signal: int(d[1])}
	}
	return Status{Code: int(d[1])}
}

// decodeRequest parses a request frame's JSON strictly: no unknown
// fields, nothing after the object, then Request.Check.
func decodeRequest(b []byte) (Request, error) {
	var req Request
	if len(b) == 0 || b[0] != '{' {
		return req, &ProtocolError{Type: FrameRequest, Msg: "not a JSON object"}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return req, &ProtocolError{Type: FrameRequest, Msg: err.Error()}
	}
	if err := d.Decode(new(json.RawMessage)); err != io.EOF {
		return req, &ProtocolError{Type: FrameRequest, Msg: "data after the request"}
	}
	if err := req.Check(); err != nil {
		return req, &ProtocolError{Type: FrameRequest, Msg: err.Error()}
	}
	return req, nil
}
