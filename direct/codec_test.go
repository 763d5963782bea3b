package direct

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gridlink/gridlink/pki"
)

func TestRefusalFrame(t *testing.T) {
	for _, reason := range []string{"", "port 80 is closed", "naïve ☃", strings.Repeat("é", MaxReason)} {
		b := encodeRefusal(reason)
		got, n, err := decodeRefusal(b)
		want := reason
		if len(want) > MaxReason {
			want = want[:MaxReason] // é is 2 bytes: MaxReason is even
		}
		if err != nil || got != want || n != len(b) {
			t.Errorf("round trip %q: %q, %d, %v", clip(reason), clip(got), n, err)
		}
		if _, _, err := decodeRefusal(b[:len(b)-1]); len(b) > refusalHeader && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("short frame: %v", err)
		}
	}
	if got, _, _ := decodeRefusal(encodeRefusal("a\x00b\nc\xffd")); got != "a b c\uFFFDd" {
		t.Errorf("sanitised %q", got)
	}
	if _, _, err := decodeRefusal([]byte{2, 0, 0}); err == nil {
		t.Error("unknown code accepted")
	}
	if _, _, err := decodeRefusal([]byte{1, 0xff, 0xff}); err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("oversized reason: %v", err)
	}
	// Reading from a connection, in pieces.
	a, b := net.Pipe()
	go func() {
		frame := encodeRefusal("go away")
		for _, c := range frame {
			_, _ = b.Write([]byte{c})
		}
		b.Close()
	}()
	if got, err := readRefusal(context.Background(), a); err != nil || got != "go away" {
		t.Errorf("readRefusal: %q, %v", got, err)
	}
	// A listener that closes without a reason.
	a2, b2 := net.Pipe()
	go func() { _, _ = b2.Write([]byte{1, 0}); b2.Close() }()
	if _, err := readRefusal(context.Background(), a2); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v", err)
	}
	// One that never says anything: the context bounds the wait.
	a3, _ := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := readRefusal(ctx, a3); err == nil {
		t.Error("silent listener: no error")
	}
}

func TestParseOffer(t *testing.T) {
	for _, c := range []struct {
		protos         []string
		proto, request string
		canRefuse, bad bool
	}{
		{protos: []string{"gridlink/1/port-80", RefusedALPN}, proto: "gridlink/1/port-80", request: "port-80", canRefuse: true},
		{protos: []string{pki.ALPN}, proto: pki.ALPN},
		{protos: []string{"h2", pki.ALPN, "gridlink/1/x"}, proto: pki.ALPN},
		{protos: []string{"gridlink/1/", "gridlink/1/ok", RefusedALPN}, proto: "gridlink/1/ok", request: "ok", canRefuse: true},
		{protos: []string{"gridlink/1/a b", RefusedALPN}, canRefuse: true, bad: true},
		{protos: []string{"h2", "http/1.1"}, bad: true},
		{protos: nil, bad: true},
		{protos: []string{RefusedALPN}, canRefuse: true, bad: true},
	} {
		proto, req, canRefuse, err := parseOffer(c.protos)
		if proto != c.proto || req != c.request || canRefuse != c.canRefuse || (err != nil) != c.bad {
			t.Errorf("parseOffer(%q) = %q, %q, %v, %v", c.protos, proto, req, canRefuse, err)
		}
	}
}

// The bytes a listener sends a refused dialler.
func FuzzRefusal(f *testing.F) {
	f.Add(encodeRefusal("port 80 is closed"))
	f.Add(encodeRefusal(""))
	f.Add([]byte{1, 0, 5, 'a', 0, 0xff, '\n', 'b'})
	f.Add([]byte{1, 0xff, 0xff})
	f.Add([]byte{7})
	f.Fuzz(func(t *testing.T, b []byte) {
		reason, n, err := decodeRefusal(b)
		if err != nil {
			if reason != "" || n != 0 {
				t.Fatalf("error %v with reason %q, n %d", err, reason, n)
			}
			return
		}
		if n < refusalHeader || n > len(b) || n > refusalHeader+MaxReason {
			t.Fatalf("frame size %d of %d bytes", n, len(b))
		}
		if !utf8.ValidString(reason) || strings.IndexFunc(reason, unicode.IsControl) >= 0 {
			t.Fatalf("unsafe reason %q", reason)
		}
		// What we decode, we encode back to the same reason.
		again, m, err := decodeRefusal(encodeRefusal(reason))
		if err != nil || again != reason || m != refusalHeader+len(reason) {
			t.Fatalf("re-encode %q: %q, %d, %v", reason, again, m, err)
		}
		// Streaming gives the same answer.
		got, err := readRefusal(context.Background(), &pipeConn{Reader: bytes.NewReader(b[:n])})
		if err != nil || got != reason {
			t.Fatalf("readRefusal %q, %v; want %q", got, err, reason)
		}
	})
}

// The ALPN protocols a ClientHello offers.
func FuzzParseOffer(f *testing.F) {
	f.Add("gridlink/1/port-80\x00gridlink/1-refused")
	f.Add("gridlink/1")
	f.Add("h2\x00gridlink/1/\x00gridlink/1/a b")
	f.Fuzz(func(t *testing.T, s string) {
		protos := strings.Split(s, "\x00")
		proto, req, _, err := parseOffer(protos)
		if err != nil {
			return
		}
		if proto != requestProto(req) || checkRequest(req) != nil {
			t.Fatalf("parseOffer(%q) = %q, %q", protos, proto, req)
		}
	})
}

// pipeConn is a net.Conn reading from a Reader (deadlines ignored).
type pipeConn struct {
	net.Conn
	io.Reader
}

func (p *pipeConn) Read(b []byte) (int, error)      { return p.Reader.Read(b) }
func (p *pipeConn) SetReadDeadline(time.Time) error { return nil }
