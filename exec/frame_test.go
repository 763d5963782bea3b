package exec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		side Side
		f    Frame
	}{
		{FromClient, Frame{FrameRequest, []byte(`{"command":["true"]}`)}},
		{FromClient, Frame{FrameStdin, bytes.Repeat([]byte{0xff}, MaxData)}},
		{FromClient, Frame{FrameStdinEOF, []byte{}}},
		{FromClient, Frame{FrameSignal, []byte{SIGINT}}},
		{FromClient, Frame{FrameWindow, []byte{0, 24, 0, 80}}},
		{FromService, Frame{FrameStarted, []byte{}}},
		{FromService, Frame{FrameRefused, []byte("subject not mapped")}},
		{FromService, Frame{FrameStdout, []byte("hello\n")}},
		{FromService, Frame{FrameStderr, []byte{0}}},
		{FromService, Frame{FrameCredit, binary.BigEndian.AppendUint32(nil, Window)}},
		{FromService, Frame{FrameExit, []byte{1, 9}}},
	} {
		b := AppendFrame(nil, tc.f.Type, tc.f.Data)
		got, err := ReadFrame(bytes.NewReader(b), tc.side)
		if err != nil || got.Type != tc.f.Type || !bytes.Equal(got.Data, tc.f.Data) {
			t.Errorf("frame %q: got %q %v", tc.f.Type, got.Type, err)
		}
	}
}

// Data frames read into a caller's buffer land there, whole, and the
// buffer serves the next frame; other frames are allocated as before.
func TestReadFrameIntoBuffer(t *testing.T) {
	buf := make([]byte, MaxData)
	calls := 0
	get := func(n int) []byte { calls++; return buf }
	var stream []byte
	stream = AppendFrame(stream, FrameStdin, bytes.Repeat([]byte{1}, MaxData))
	stream = AppendFrame(stream, FrameStdin, []byte("two"))
	stream = AppendFrame(stream, FrameSignal, []byte{SIGINT})
	r := bytes.NewReader(stream)
	f, err := readFrame(r, FromClient, get)
	if err != nil || len(f.Data) != MaxData || &f.Data[0] != &buf[0] || f.Data[MaxData-1] != 1 {
		t.Fatalf("a full stdin frame: %v, %d bytes, in the buffer %v", err, len(f.Data), err == nil && &f.Data[0] == &buf[0])
	}
	f, err = readFrame(r, FromClient, get)
	if err != nil || string(f.Data) != "two" || &f.Data[0] != &buf[0] {
		t.Fatalf("the next stdin frame: %v %q", err, f.Data)
	}
	f, err = readFrame(r, FromClient, get)
	if err != nil || f.Type != FrameSignal || &f.Data[0] == &buf[0] || calls != 2 {
		t.Fatalf("a signal frame: %v %q, %d buffers asked for", err, f.Data, calls)
	}
	// the pool's buffers come back whole
	b := stdinBuf(10)
	putStdinBuf(b)
	if b2 := stdinBuf(MaxData); len(b2) != MaxData {
		t.Fatalf("a pooled buffer of %d bytes", len(b2))
	}
}

// Every malformed frame is refused as a *ProtocolError, never accepted.
func TestFrameStrict(t *testing.T) {
	for _, tc := range []struct {
		name string
		side Side
		b    []byte
	}{
		{"unknown type", FromService, AppendFrame(nil, 'z', []byte("x"))},
		{"stdout from the client", FromClient, AppendFrame(nil, FrameStdout, []byte("x"))},
		{"exit from the client", FromClient, AppendFrame(nil, FrameExit, []byte{0, 0})},
		{"stdin from the service", FromService, AppendFrame(nil, FrameStdin, []byte("x"))},
		{"empty stdout", FromService, AppendFrame(nil, FrameStdout, nil)},
		{"huge stdout", FromService, binary.BigEndian.AppendUint32([]byte{FrameStdout}, MaxData+1)},
		{"huge length", FromService, []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}},
		{"exit signal 0", FromService, AppendFrame(nil, FrameExit, []byte{1, 0})},
		{"exit signal 65", FromService, AppendFrame(nil, FrameExit, []byte{1, 65})},
		{"exit kind 2", FromService, AppendFrame(nil, FrameExit, []byte{2, 0})},
		{"long exit", FromService, AppendFrame(nil, FrameExit, []byte{0, 0, 0})},
		{"zero credit", FromService, AppendFrame(nil, FrameCredit, []byte{0, 0, 0, 0})},
		{"credit past the window", FromService, AppendFrame(nil, FrameCredit, binary.BigEndian.AppendUint32(nil, Window+1))},
		{"reason with a newline", FromService, AppendFrame(nil, FrameRefused, []byte("a\nb"))},
		{"reason not UTF-8", FromService, AppendFrame(nil, FrameRefused, []byte{0xff})},
		{"empty reason", FromService, AppendFrame(nil, FrameRefused, nil)},
		{"started with data", FromService, AppendFrame(nil, FrameStarted, []byte("x"))},
		{"SIGKILL", FromClient, AppendFrame(nil, FrameSignal, []byte{9})},
		{"zero window", FromClient, AppendFrame(nil, FrameWindow, []byte{0, 0, 0, 80})},
		{"EOF with data", FromClient, AppendFrame(nil, FrameStdinEOF, []byte("x"))},
		{"features from the client", FromClient, AppendFrame(nil, FrameFeatures, []byte{0})},
		{"no features byte", FromService, AppendFrame(nil, FrameFeatures, nil)},
		{"unknown feature flag", FromService, AppendFrame(nil, FrameFeatures, []byte{2})},
		{"stdin link without its token", FromService, AppendFrame(nil, FrameFeatures, []byte{featureStdinLink})},
		{"a token without a stdin link", FromService, AppendFrame(nil, FrameFeatures, append([]byte{0}, make([]byte, tokenSize)...))},
		{"short token", FromService, AppendFrame(nil, FrameFeatures, append([]byte{featureStdinLink}, make([]byte, tokenSize-1)...))},
		{"join from the service", FromService, AppendFrame(nil, FrameJoin, make([]byte, tokenSize))},
		{"short join", FromClient, AppendFrame(nil, FrameJoin, make([]byte, tokenSize-1))},
		{"long join", FromClient, AppendFrame(nil, FrameJoin, make([]byte, tokenSize+1))},
	} {
		_, err := ReadFrame(bytes.NewReader(tc.b), tc.side)
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a *ProtocolError", tc.name, err)
		}
	}
	if _, err := ReadFrame(bytes.NewReader(nil), FromService); err != io.EOF {
		t.Errorf("no bytes: %v, want io.EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{FrameStdout, 0, 0}), FromService); err == nil || errors.Is(err, io.EOF) && err == io.EOF {
		t.Errorf("a cut header: %v, want an error other than io.EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader(AppendFrame(nil, FrameStdout, []byte("abc"))[:6]), FromService); err == nil || err == io.EOF {
		t.Errorf("a cut payload: %v", err)
	}
}

func TestRequestStrict(t *testing.T) {
	good := `{"account":"alice","command":["tar","x"],"env":["A=1"],"dir":"/tmp","pty":true,"term":"xterm","rows":24,"cols":80}`
	if _, err := decodeRequest([]byte(good)); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	for _, bad := range []string{
		`{"command":["x"],"extra":1}`,
		`{"command":["x"]} {}`,
		`{"command":["x"]}}`,
		`{"account":"../root"}`,
		`{"account":"-f"}`,
		`{"env":["1A=x"]}`,
		`{"env":["A"]}`,
		`{"env":["LD_PRELOAD=x\u0000"]}`,
		`{"dir":"relative"}`,
		`{"term":"xterm"}`,
		`{"pty":true,"term":"a b"}`,
		`{"command":["a\u0000b"]}`,
		`[]`,
		`null`,
	} {
		if _, err := decodeRequest([]byte(bad)); err == nil {
			t.Errorf("request %s accepted", bad)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, FrameStdout, []byte("hi")), false)
	f.Add(AppendFrame(nil, FrameExit, []byte{0, 3}), false)
	f.Add(AppendFrame(nil, FrameCredit, []byte{0, 0, 1, 0}), false)
	f.Add(AppendFrame(nil, FrameRefused, []byte("no")), false)
	f.Add(AppendFrame(nil, FrameRequest, []byte(`{"command":["id"]}`)), true)
	f.Add(AppendFrame(nil, FrameSignal, []byte{2}), true)
	f.Add(AppendFrame(nil, FrameWindow, []byte{0, 1, 0, 1}), true)
	f.Add([]byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}, false)
	f.Add(AppendFrame(nil, FrameFeatures, []byte{0}), false)
	f.Add(AppendFrame(nil, FrameFeatures, append([]byte{featureStdinLink}, bytes.Repeat([]byte{7}, tokenSize)...)), false)
	f.Add(AppendFrame(nil, FrameJoin, bytes.Repeat([]byte{7}, tokenSize)), true)
	f.Fuzz(func(t *testing.T, b []byte, client bool) {
		side := FromService
		if client {
			side = FromClient
		}
		fr, err := ReadFrame(bytes.NewReader(b), side)
		// read into a reused buffer (the data path's), it decodes the same
		scratch := bytes.Repeat([]byte{0xa5}, MaxData)
		fr2, err2 := readFrame(bytes.NewReader(b), side, func(int) []byte { return scratch })
		if (err == nil) != (err2 == nil) || (err == nil && (fr2.Type != fr.Type || !bytes.Equal(fr2.Data, fr.Data))) {
			t.Fatalf("read into a buffer: %q %x %v; ReadFrame: %q %x %v", fr2.Type, fr2.Data, err2, fr.Type, fr.Data, err)
		}
		if err != nil {
			return
		}
		again := AppendFrame(nil, fr.Type, fr.Data)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("re-encoded %x, read from %x", again, b)
		}
		if fr.Type == FrameRequest {
			_, _ = decodeRequest(fr.Data)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"command":["tar","x","-C","/tmp/x"],"env":["A=b"]}`))
	f.Add([]byte(`{"account":"root","pty":true,"rows":1,"cols":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"command":["cat"],"features":["stdin-link","later-1"]}`))
	f.Add([]byte(`{"features":["Bad"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			return
		}
		if err := req.Check(); err != nil {
			t.Fatalf("accepted a request that fails its check: %v", err)
		}
	})
}
