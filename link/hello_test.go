package link

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{kind: helloOpen, flags: flagNoReply, compress: CompressOff, link: LinkID{1, 2, 3}},
		{kind: helloOpen, flags: flagPlain | flagBlocks, compress: CompressAuto},
		{kind: helloJoin, flags: flagBlocks, compress: CompressZstd, link: LinkID{15: 9}},
		{kind: helloOpen, flags: flagBlocks | flagResume, link: LinkID{4}, token: [tokenSize]byte{1, 31: 2}, window: minWindow, timeout: 1},
		{kind: helloJoin, flags: flagBlocks | flagResume | flagPlain, link: LinkID{4}, token: [tokenSize]byte{7}},
	} {
		b := h.append(nil)
		if want := helloSize + map[bool]int{true: resumeExtSize}[h.flags&flagResume != 0]; len(b) != want {
			t.Fatalf("%+v encodes to %d bytes", h, len(b))
		}
		got, err := parseHello(b)
		if err != nil || got != h {
			t.Fatalf("%+v came back as %+v, %v", h, got, err)
		}
	}
	for _, r := range []reply{{status: replyOK, flags: flagPlain}, {status: replyRefused, reason: "no link 01020304 here"},
		{status: replyOK, flags: flagResume, window: MaxWindow, timeout: maxTimeoutMs}, {status: replyRefused, flags: flagResume, reason: "wrong resume token"}} {
		got, err := readReply(bytes.NewReader(r.append(nil)))
		if err != nil || got != r {
			t.Fatalf("%+v came back as %+v, %v", r, got, err)
		}
	}
	long := reply{status: replyRefused, reason: strings.Repeat("é", maxReason)}
	got, err := readReply(bytes.NewReader(long.append(nil)))
	if err != nil || len(got.reason) > maxReason || !strings.HasPrefix(long.reason, got.reason) {
		t.Fatalf("a long reason: %d bytes, %v", len(got.reason), err)
	}
}

var (
	resumeOpen = hello{kind: helloOpen, flags: flagBlocks | flagResume, token: [tokenSize]byte{9}, window: 16 << 20, timeout: 30000}.append(nil)
	resumeJoin = hello{kind: helloJoin, flags: flagBlocks | flagResume, token: [tokenSize]byte{9}}.append(nil)
)

func TestBadHello(t *testing.T) {
	good := hello{kind: helloJoin, flags: flagBlocks}.append(nil)
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"short":        {good[:10], "10 bytes"},
		"magic":        {append([]byte("GET "), good[4:]...), "not a gridlink link"},
		"kind":         {patch(good, 4, 9), "unknown kind 9"},
		"flags":        {patch(good, 5, 0x80), "unknown flags"},
		"join no wait": {patch(good, 5, flagNoReply), "a join without a reply"},
		"codec":        {patch(good, 6, 7), "unknown compression 7"},
		"reserved":     {patch(good, 7, 1), "reserved byte"},
		"no wait plain": {patch(patch(good, 4, helloOpen), 5, flagNoReply|flagPlain),
			"waits for the reply"},
		"resume short":     {patch(good, 5, flagBlocks|flagResume), "24 bytes, want 64"},
		"resume no blocks": {patch(resumeOpen, 5, flagResume), "without blocks"},
		"resume no wait":   {patch(resumeOpen, 5, flagResume|flagBlocks|flagNoReply), "waits for the reply"},
		"zero token":       {append(resumeOpen[:helloSize:helloSize], make([]byte, resumeExtSize)...), "token of zeros"},
		"small window":     {patch(resumeOpen, helloSize+tokenSize, 0), "window of"},
		"huge window":      {patch(resumeOpen, helloSize+tokenSize, 0xff), "window of"},
		"join window":      {patch(resumeJoin, helloSize+tokenSize+3, 1), "a join with a window"},
		"zero timeout":     {patch(patch(patch(resumeOpen, helloSize+tokenSize+6, 0), helloSize+tokenSize+7, 0), helloSize+tokenSize+5, 0), "resume timeout of 0 ms"},
		"huge timeout":     {patch(resumeOpen, helloSize+tokenSize+4, 0xff), "resume timeout of"},
		"join timeout":     {patch(resumeJoin, helloSize+tokenSize+7, 1), "a join with a resume timeout"},
	} {
		_, err := parseHello(c.b)
		if !errors.Is(err, ErrHello) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrHello saying %q", name, err, c.want)
		}
	}
}

func patch(b []byte, i int, v byte) []byte {
	b = append([]byte(nil), b...)
	b[i] = v
	return b
}

// FuzzHello: any bytes either parse into a hello that encodes back to
// them, or fail with ErrHello; the same for replies.
func FuzzHello(f *testing.F) {
	f.Add(hello{kind: helloOpen, flags: flagPlain | flagBlocks, compress: CompressS2}.append(nil))
	f.Add(hello{kind: helloJoin, flags: flagBlocks, link: LinkID{1}}.append(nil))
	f.Add(reply{status: replyRefused, reason: "why"}.append(nil))
	f.Add(reply{status: replyOK, flags: flagPlain}.append(nil))
	f.Add(resumeOpen)
	f.Add(resumeJoin)
	f.Add(resumeOpen[:helloSize])
	f.Add(reply{status: replyOK, flags: flagResume | flagPlain, window: 1 << 24, timeout: 5000}.append(nil))
	f.Add(reply{status: replyOK, flags: flagResume, window: 1}.append(nil))
	f.Add(reply{status: replyOK, flags: flagResume, window: 1 << 24}.append(nil)) // no timeout
	f.Add(reply{status: replyRefused, flags: flagResume, reason: "why"}.append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHello(b); err == nil {
			if !bytes.Equal(h.append(nil), b) {
				t.Fatalf("hello %x parsed as %+v, encodes as %x", b, h, h.append(nil))
			}
		} else if !errors.Is(err, ErrHello) {
			t.Fatalf("hello error %v is not an ErrHello", err)
		}
		r, err := readReply(bytes.NewReader(b))
		if err == nil {
			if enc := r.append(nil); !bytes.Equal(enc, b[:len(enc)]) {
				t.Fatalf("reply %x parsed as %+v, encodes as %x", b, r, enc)
			}
		}
	})
}
