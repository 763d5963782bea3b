package chain

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gridlink/gridlink/pki/proxy"
)

// frame packs a chain into one fuzz input: each certificate a uint16
// length and its bytes.
func frame(chain [][]byte) []byte {
	var out []byte
	for _, c := range chain {
		out = binary.BigEndian.AppendUint16(out, uint16(len(c)))
		out = append(out, c...)
	}
	return out
}

func unframe(data []byte) [][]byte {
	var chain [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		if n > len(data) {
			n = len(data)
		}
		chain = append(chain, data[:n])
		data = data[n:]
	}
	return chain
}

// FuzzVerify feeds chains, valid and broken, to Verify: it must never
// panic, and must either prove an identity or say why not with an *Error.
func FuzzVerify(f *testing.F) {
	w := newWorld(f)
	p1 := mkProxy(f, w.alice, proxy.Options{})
	r := mkProxy(f, p1, proxy.Options{Restrict: []string{"xfer"}, LimitPath: true, PathLen: 1})
	at := mkProxy(f, r, proxy.Options{Restrict: []string{"xfer@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"}})
	for _, c := range [][][]byte{
		raw(at),
		raw(w.node),
		raw(w.alice),
		raw(p1),
		raw(r),
		append(raw(r), w.ca.Cert.Raw),
		{p1.Leaf().Raw},
		{r.Leaf().Raw, w.alice.Leaf().Raw},
		raw(w.craft(f, w.alice, w.bob.Key, nil)),
	} {
		f.Add(frame(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := w.v.Verify(unframe(data), w.now)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Reason == nil || e.Cert == "" || e.Detail == "" {
				t.Fatalf("error %v is not a complete *Error", err)
			}
			return
		}
		if res.EndEntity == nil || res.CA == nil || res.Leaf == nil || !res.Role.Valid() || res.Name == "" {
			t.Fatalf("incomplete result %+v", res)
		}
	})
}
