package pki

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// After the TLS handshake, each end judges the other (its certificate
// chain, and whether that peer may use what it asked for) and sends its
// verdict as the first bytes of application data, before anything else:
//
//	verdict:
//	  magic   4 bytes  "GLVD"
//	  code    1 byte   0 admitted, 1 refused
//	  length  uint16   the reason's length: 0 when admitted, 1..MaxReason when refused
//	  reason  UTF-8 text without control characters: why the peer is refused
//
// A refusing end closes the connection after its verdict. The verdict
// travels inside TLS, so the refused end learns why (an expired
// certificate, a revoked one, another grid's CA...) instead of a bare
// "bad certificate" alert, and the reason is authenticated. Neither end
// waits for the other's verdict before sending its own or its first data:
// Conn reads the peer's verdict before the first byte of data, so a
// verdict costs no round trip.
const (
	verdictMagic  = "GLVD"
	verdictHeader = 7
	verdictAdmit  = 0
	verdictRefuse = 1
	// MaxReason bounds a refusal's reason, in bytes.
	MaxReason = 1024
)

// ErrDenied is wrapped by the errors of a refused handshake, on both ends
// (*DeniedError).
var ErrDenied = errors.New("not admitted")

// DeniedError is a refusal: this end refused the peer (ByPeer false), or
// the peer refused this end (ByPeer true), for Reason.
type DeniedError struct {
	Peer   string // the peer as far as it is known: its subject or ID
	Reason string
	ByPeer bool
	// Cause is this end's judgement (a *chain.Error, a restriction, ...)
	// when this end refused; nil when the peer did (ByPeer: only its
	// words came). Not unwrapped: errors.Is on a DeniedError stays
	// ErrDenied alone; it is for telling refusals apart by kind.
	Cause error
}

func (e *DeniedError) Error() string {
	if e.ByPeer {
		return fmt.Sprintf("%v by %s: %s", ErrDenied, e.Peer, e.Reason)
	}
	return fmt.Sprintf("%s %v: %s", e.Peer, ErrDenied, e.Reason)
}

func (e *DeniedError) Unwrap() error { return ErrDenied }

// appendVerdict encodes a verdict: admitted if reason is empty.
func appendVerdict(b []byte, reason string) []byte {
	reason = cleanReason(reason)
	b = append(b, verdictMagic...)
	if reason == "" {
		return append(b, verdictAdmit, 0, 0)
	}
	b = append(b, verdictRefuse)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// cleanReason makes a reason fit the format: valid UTF-8, no control
// characters, at most MaxReason bytes.
func cleanReason(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	for len(s) > MaxReason {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// parseVerdictHeader decodes a verdict's first verdictHeader bytes: the
// length of the reason that follows (0: admitted).
func parseVerdictHeader(h []byte) (refused bool, n int, err error) {
	if len(h) != verdictHeader || string(h[:4]) != verdictMagic {
		return false, 0, fmt.Errorf("peer sent no verdict (got %q): not a gridlink endpoint", h)
	}
	n = int(binary.BigEndian.Uint16(h[5:]))
	switch h[4] {
	case verdictAdmit:
		if n != 0 {
			return false, 0, fmt.Errorf("admitting verdict with a %d-byte reason", n)
		}
		return false, 0, nil
	case verdictRefuse:
		if n == 0 || n > MaxReason {
			return false, 0, fmt.Errorf("refusal with a reason of %d bytes (1..%d)", n, MaxReason)
		}
		return true, n, nil
	}
	return false, 0, fmt.Errorf("verdict code %d unknown", h[4])
}

// checkReason validates a refusal's reason text.
func checkReason(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", errors.New("refusal reason is not UTF-8")
	}
	for _, r := range string(b) {
		if r < ' ' || r == 0x7f {
			return "", errors.New("refusal reason has control characters")
		}
	}
	return string(b), nil
}

// readVerdict reads the peer's verdict from r: nil if admitted, else a
// *DeniedError (ByPeer) or an error saying why the verdict is unreadable.
func readVerdict(r io.Reader, peer string) error {
	var h [verdictHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return fmt.Errorf("waiting for %s's verdict: %w", peer, err)
	}
	refused, n, err := parseVerdictHeader(h[:])
	if err != nil {
		return fmt.Errorf("%s: %w", peer, err)
	}
	if !refused {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("%s's refusal cut short: %w", peer, err)
	}
	reason, err := checkReason(b)
	if err != nil {
		return fmt.Errorf("%s: %w", peer, err)
	}
	return &DeniedError{Peer: peer, Reason: reason, ByPeer: true}
}

// Conn is a connection after a gridlink handshake: TLS, the peer proved,
// this end's verdict sent. Its first Read first reads the peer's verdict
// (Verdict), so a refusal reaches the caller as a *DeniedError naming the
// reason.
type Conn struct {
	*tls.Conn
	Peer Peer

	mu    sync.Mutex
	done  bool
	err   error
	wrote atomic.Bool // data written after our verdict
}

// Verdict waits for the peer's verdict, once: nil if this end was
// admitted. Reads of data wait for it, so calling it is needed only to
// learn the verdict before reading (hub links, which leave TLS next).
func (c *Conn) Verdict() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.err = readVerdict(c.Conn, c.Peer.String())
		c.done = true
	}
	return c.err
}

// Read reads data, after the peer's verdict.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.Verdict(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// Write writes data. If the write fails because the peer refused this end
// and closed, the refusal is returned instead (Explain).
func (c *Conn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	n, err := c.Conn.Write(p)
	if err != nil {
		err = c.Explain(err)
	}
	return n, err
}

// WriteRecords is Write through WriteRecords: a large write's records go
// out in few writes.
func (c *Conn) WriteRecords(p []byte) (int, error) {
	c.wrote.Store(true)
	n, err := WriteRecords(c.Conn, p)
	if err != nil {
		err = c.Explain(err)
	}
	return n, err
}

// WriteBuffers is Write through WriteBuffers: the records of all the
// buffers go out in few writes.
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	c.wrote.Store(true)
	n, err := WriteBuffers(c.Conn, bufs)
	if err != nil {
		err = c.Explain(err)
	}
	return n, err
}

// closeWait bounds how long Close and Explain wait for a verdict not yet
// read.
const closeWait = time.Second

// Explain turns a failed write into the peer's refusal, if the peer
// refused this end: its verdict is read (for at most a second) when it
// was not yet.
func (c *Conn) Explain(err error) error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if !done {
		_ = c.Conn.SetReadDeadline(time.Now().Add(closeWait))
	}
	var de *DeniedError
	if verr := c.Verdict(); errors.As(verr, &de) {
		return de
	}
	return err
}

// Close closes the connection. If data was written and the peer's
// verdict not yet read, it reads the verdict first (for at most a
// second): closing a socket with bytes unread would reset the connection,
// and the peer could lose what it had not yet read of ours.
func (c *Conn) Close() error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if !done && c.wrote.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(closeWait))
		_ = c.Verdict()
	}
	return c.Conn.Close()
}

// admit sends this end's verdict on the peer: judged is nil to admit, else
// the refusal, after which the connection is closed and a *DeniedError
// returned.
func (c *Conn) admit(judged error) error {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	defer c.Conn.SetWriteDeadline(time.Time{})
	if judged == nil {
		if _, err := c.Conn.Write(appendVerdict(nil, "")); err != nil {
			c.Conn.Close()
			return fmt.Errorf("sending verdict to %s: %w", c.Peer, err)
		}
		return nil
	}
	reason := judged.Error()
	if reason == "" {
		reason = "refused"
	}
	_, _ = c.Conn.Write(appendVerdict(nil, reason))
	// Closing with the peer's first data unread would reset the
	// connection, which can discard the verdict before the peer reads it:
	// end our side, and read what the peer still sends for a moment.
	_ = c.Conn.CloseWrite()
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.Copy(io.Discard, c.Conn.NetConn())
		c.Conn.Close()
	}()
	return &DeniedError{Peer: c.Peer.String(), Reason: cleanReason(reason), Cause: judged}
}
