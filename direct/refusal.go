package direct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gridlink/gridlink/identity"
)

// ErrRefused is wrapped by every refusal in gridlink, whatever the layer
// that refused (a direct listener in its handshake, a node's port through
// the hubs, a link acceptor): the target was reached and said no, so
// trying it again, or its other addresses, meets the same answer. The
// error is a *RefusedError (errors.As) naming the refusing end and its
// reason, or a refusal of a service above that carries facts of its own
// and wraps ErrRefused (exec's and xfer's refusals, a virtual network's
// carrier refused: each package's refusal_test.go lists them); no other
// package defines a refusal sentinel of its own.
var ErrRefused = errors.New("refused")

// What a refusal refused (RefusedError.What).
const (
	// RefusedHandshake: a direct listener's Check said no in the TLS
	// handshake (Peer is the listener, proved).
	RefusedHandshake = ""
	// RefusedConnection: a node refused a virtual connection to one of
	// its ports (nothing listens there, or its access rules say no).
	RefusedConnection = "connection"
	// RefusedLink: a link acceptor refused what a link's hello asked
	// (its options, a service it does not offer).
	RefusedLink = "link"
)

// RefusedError is a refusal: which end refused what, and its reason. The
// refused end's error and the refusing end's log say the same Reason.
type RefusedError struct {
	What    string      // Refused*: what was refused
	End     string      // the refusing end, in words (a node's name, an address); may be empty when Reason names it
	Peer    identity.ID // the refusing end's ID, when its handshake proved it
	Request string      // what was asked of it, if known
	Reason  string      // the refusing end's words, sanitised
	Here    bool        // this end refused (the refusing end's own record)
}

func (e *RefusedError) Error() string {
	req := ""
	if e.Request != "" {
		req = fmt.Sprintf(" (request %q)", e.Request)
	}
	switch {
	case e.What == RefusedHandshake:
		return fmt.Sprintf("refused by the listener %s%s: %s", e.Peer.Short(), req, e.Reason)
	case e.Here:
		return fmt.Sprintf("%s refused here: %s", e.What, e.Reason)
	case e.End != "":
		return fmt.Sprintf("%s refused by %s%s: %s", e.What, e.End, req, e.Reason)
	}
	return fmt.Sprintf("%s refused%s: %s", e.What, req, e.Reason)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// The refusal frame. When the listener selects RefusedALPN it completes the
// handshake, writes one frame inside TLS and closes the connection:
//
//	offset size field
//	0      1    code     refusalCode (1); other values are reserved
//	1      2    length   big-endian length n of the reason, at most MaxReason
//	3      n    reason   UTF-8 text for people
//
// The dialler learns of the refusal from ALPN when its handshake ends; the
// frame follows one round trip later and adds only the reason.
const (
	refusalCode   = 1
	refusalHeader = 3
	// MaxReason is the longest reason sent, in bytes; longer ones are cut.
	MaxReason = 1024
	// reasonWait bounds how long a refused dialler waits for the reason.
	reasonWait = 5 * time.Second
)

// encodeRefusal returns the frame for reason, cut to MaxReason bytes at a
// character boundary.
func encodeRefusal(reason string) []byte {
	reason = sanitize(reason)
	if len(reason) > MaxReason {
		cut := MaxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	b := make([]byte, refusalHeader+len(reason))
	b[0] = refusalCode
	binary.BigEndian.PutUint16(b[1:3], uint16(len(reason)))
	copy(b[3:], reason)
	return b
}

// decodeRefusal decodes a refusal frame at the start of b and returns the
// sanitised reason and the frame's size. io.ErrUnexpectedEOF means b holds
// only part of a frame.
func decodeRefusal(b []byte) (reason string, n int, err error) {
	if len(b) < refusalHeader {
		return "", 0, io.ErrUnexpectedEOF
	}
	if b[0] != refusalCode {
		return "", 0, fmt.Errorf("refusal frame: unknown code %d", b[0])
	}
	size := int(binary.BigEndian.Uint16(b[1:3]))
	if size > MaxReason {
		return "", 0, fmt.Errorf("refusal frame: reason of %d bytes, at most %d", size, MaxReason)
	}
	if len(b) < refusalHeader+size {
		return "", 0, io.ErrUnexpectedEOF
	}
	return sanitize(string(b[refusalHeader : refusalHeader+size])), refusalHeader + size, nil
}

// Sanitize makes text from another end safe to print: valid UTF-8
// without control characters (each replaced by a space), as refusal
// reasons are.
func Sanitize(s string) string { return sanitize(s) }

// sanitize makes text safe to print: valid UTF-8 without control
// characters (each replaced by a space).
func sanitize(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// readRefusal reads the refusal frame from c within ctx and reasonWait.
func readRefusal(ctx context.Context, c net.Conn) (string, error) {
	deadline := time.Now().Add(reasonWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 0, refusalHeader+64)
	tmp := make([]byte, 512)
	for {
		if reason, _, err := decodeRefusal(buf); err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			return reason, err
		}
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if len(buf) > refusalHeader+MaxReason {
			buf = buf[:refusalHeader+MaxReason]
		}
		if err != nil && n == 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", fmt.Errorf("reading the reason: %w", err)
		}
	}
}
