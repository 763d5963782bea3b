package pki

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
)

func TestVerdictRoundTrip(t *testing.T) {
	for _, reason := range []string{"", "expired at 2026-11-22", strings.Repeat("é", 600), "tab\there"} {
		err := readVerdict(bytes.NewReader(appendVerdict(nil, reason)), "peer")
		if reason == "" {
			if err != nil {
				t.Errorf("admitted: %v", err)
			}
			continue
		}
		var de *DeniedError
		if !errors.As(err, &de) || !de.ByPeer || de.Reason != cleanReason(reason) || len(de.Reason) > MaxReason {
			t.Errorf("refusal %.20q: %v", reason, err)
		}
	}
	for _, bad := range [][]byte{
		nil, []byte("GLVD\x00\x00"), []byte("GLVX\x00\x00\x00"), []byte("GLVD\x02\x00\x00"),
		[]byte("GLVD\x00\x00\x01x"), []byte("GLVD\x01\x00\x00"), []byte("GLVD\x01\x00\x05abc"),
		[]byte("GLVD\x01\x04\x01"), []byte("GLVD\x01\x00\x02\x01\x02"), []byte("GLVD\x01\x00\x02\xff\xfe"),
	} {
		err := readVerdict(bytes.NewReader(bad), "peer")
		if err == nil || errors.Is(err, ErrDenied) {
			t.Errorf("%q: %v, want a malformed-verdict error", bad, err)
		}
	}
}

func FuzzVerdict(f *testing.F) {
	f.Add(appendVerdict(nil, ""))
	f.Add(appendVerdict(nil, "revoked"))
	f.Add([]byte("GLVD\x01\x00\x03a\x00b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := readVerdict(bytes.NewReader(b), "peer")
		var de *DeniedError
		if errors.As(err, &de) {
			if de.Reason == "" || len(de.Reason) > MaxReason || de.Reason != cleanReason(de.Reason) {
				t.Fatalf("accepted reason %q", de.Reason)
			}
			// What was accepted re-encodes to the bytes read.
			enc := appendVerdict(nil, de.Reason)
			if !bytes.Equal(enc, b[:len(enc)]) {
				t.Fatalf("%q re-encodes as %q", b, enc)
			}
		}
		if err == nil && !bytes.HasPrefix(b, appendVerdict(nil, "")) {
			t.Fatalf("%q admitted", b)
		}
	})
}

// fuzzConn feeds bytes to a handshake and swallows what it writes.
type fuzzConn struct {
	r *bytes.Reader
}

func (c fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c fuzzConn) Close() error                     { return nil }
func (c fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// A handshake fed arbitrary bytes fails cleanly, on both sides.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte("\x16\x03\x01\x00\x05hello"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(appendVerdict(nil, "x"))
	creds, err := NewCredentials(identity.KeyFromSeed(make([]byte, 32)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if c, err := creds.Server(ctx, fuzzConn{bytes.NewReader(b)}, nil); err == nil {
			t.Fatalf("handshake of %q succeeded with %s", b, c.Peer)
		}
		if c, err := creds.Client(ctx, fuzzConn{bytes.NewReader(b)}, identity.ID{}, nil); err == nil {
			t.Fatalf("client handshake of %q succeeded with %s", b, c.Peer)
		}
	})
}
