package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, KeySize)

type testFrame struct {
	t       Type
	flags   uint8
	circuit uint32
	payload string
}

var sealCases = []testFrame{
	{TControl, 0, 0, `{"kind":"lookup","lookup":{"query":1,"node":"a"}}`},
	{TData, 0, 3, "data stays as it is"},
	{TWindow, 0, 3, "\x00\x01\x00\x00"},
	{TPing, 0, 0, "12345678"},
	{TData, 0, 5, ""},
	{TFin, 0, 3, ""},
	{TReset, FlagHub, 5, "no route"},
}

func sealStream(t testing.TB, frames []testFrame) []byte {
	s, err := NewSealer(testKey)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, f := range frames {
		b = s.Append(b, f.t, f.flags, f.circuit, []byte(f.payload))
	}
	return b
}

func sealedReader(t testing.TB, b []byte) *Reader {
	r := NewReader(bytes.NewReader(b))
	if err := r.Unseal(testKey); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSealRoundTrip(t *testing.T) {
	b := sealStream(t, sealCases)
	// data frames are in the clear, nothing else is.
	if !bytes.Contains(b, []byte("data stays as it is")) || bytes.Contains(b, []byte("lookup")) || bytes.Contains(b, []byte("no route")) {
		t.Fatalf("stream %q: data must be clear, the rest sealed", b)
	}
	r := sealedReader(t, b)
	for _, want := range sealCases {
		f, err := r.Read()
		if err != nil {
			t.Fatalf("reading %v: %v", want, err)
		}
		if f.Type != want.t || f.Flags != want.flags || f.Circuit != want.circuit || string(f.Payload) != want.payload {
			t.Fatalf("got %v flags %d %q, want %+v", f, f.Flags, f.Payload, want)
		}
	}
}

func TestSealRejects(t *testing.T) {
	stream := sealStream(t, sealCases[:3]) // sealed, data, sealed
	first := HeaderSize + HeaderSize + len(sealCases[0].payload) + 16
	cases := []struct {
		name string
		b    []byte
		key  []byte
		want string
	}{
		{"tampered", func() []byte { b := bytes.Clone(stream); b[HeaderSize+3] ^= 1; return b }(), testKey, "failed authentication"},
		{"replayed", append(bytes.Clone(stream[:first]), stream[:first]...), testKey, "sealed frame 1 failed authentication"},
		{"dropped", stream[first:], testKey, "failed authentication"},
		{"wrong key", stream, bytes.Repeat([]byte{8}, KeySize), "failed authentication"},
		{"unsealed control", Append(nil, TControl, 0, []byte(`{}`)), testKey, "control frame not sealed"},
		{"unsealed window", Append(nil, TWindow, 1, WindowPayload(1)), testKey, "window frame not sealed"},
		{"tiny sealed", Append(nil, TSealed, 0, []byte("x")), testKey, "sealed frame of 1 bytes"},
		{"sealed on a circuit", Append(nil, TSealed, 9, make([]byte, 40)), testKey, "sealed frame on circuit 9"},
	}
	for _, c := range cases {
		r := NewReader(bytes.NewReader(c.b))
		if err := r.Unseal(c.key); err != nil {
			t.Fatal(err)
		}
		var err error
		for err == nil {
			_, err = r.Read()
		}
		if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrFrame saying %q", c.name, err, c.want)
		}
	}
	// a sealed frame before the keys
	_, err := NewReader(bytes.NewReader(stream)).Read()
	if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "before the link's keys") {
		t.Errorf("sealed frame without keys: %v", err)
	}
	if _, err := NewSealer(make([]byte, 16)); err == nil {
		t.Error("a 16-byte key was accepted")
	}
}

// A sealed frame may carry neither data nor another sealed frame, and its
// inner header must match its size.
func TestSealInnerChecks(t *testing.T) {
	a, _ := newAEAD(testKey)
	inner := func(raw []byte) []byte {
		var n [12]byte
		body := a.Seal(nil, nonce(&n, 0), raw, nil)
		return Append(nil, TSealed, 0, body)
	}
	for name, c := range map[string]struct {
		raw  []byte
		want string
	}{
		"data inside":   {Append(nil, TData, 1, []byte("x")), "carries a data frame"},
		"sealed inside": {Append(nil, TSealed, 0, make([]byte, 30)), "carries a sealed frame"},
		"short inside":  {append(Append(nil, TControl, 0, []byte("{}")), 'x'), "says 2 bytes, carries 3"},
		"bad header":    {[]byte{99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "unknown type 99"},
	} {
		_, err := sealedReader(t, inner(c.raw)).Read()
		if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func FuzzSealedReader(f *testing.F) {
	f.Add(sealStream(f, sealCases))
	f.Add(sealStream(f, sealCases[:1]))
	f.Add(Append(nil, TData, 1, []byte("hi")))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := sealedReader(t, b)
		for {
			fr, err := r.Read()
			if err != nil {
				if !errors.Is(err, ErrFrame) && !errors.Is(err, io.EOF) {
					t.Fatalf("error %v does not wrap ErrFrame", err)
				}
				return
			}
			if fr.Type == TSealed || len(fr.Payload) > MaxPayload {
				t.Fatalf("decoded %v", fr)
			}
		}
	})
}
