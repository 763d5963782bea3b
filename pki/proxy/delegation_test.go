package proxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

func TestDelegation(t *testing.T) {
	f := setup(t)
	mine, err := New(f.alice, Options{}) // alice's proxy init
	if err != nil {
		t.Fatal(err)
	}
	// The service asks; alice's side signs; the service accepts.
	pending, req, err := NewRequest(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := Delegate(mine, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pending.Accept(answer)
	if err != nil {
		t.Fatal(err)
	}
	leaf := got.Leaf()
	if len(got.Chain) != 3 || !got.Chain[1].Equal(mine.Leaf()) || !got.Chain[2].Equal(f.alice.Leaf()) {
		t.Fatalf("chain of %d", len(got.Chain))
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life != DefaultDelegatedLifetime+5*time.Minute {
		t.Errorf("delegated lifetime %v", life)
	}
	if err := mine.Leaf().CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature); err != nil {
		t.Error(err)
	}
	// The delegated proxy can delegate in turn.
	p2, req2, _ := NewRequest(time.Minute, nil)
	r2, err := ParseRequest(req2)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := Delegate(got, r2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	third, err := p2.Accept(a2)
	if err != nil || len(third.Chain) != 4 {
		t.Fatalf("second hop: %v", err)
	}
	if life := third.Leaf().NotAfter.Sub(third.Leaf().NotBefore); life > time.Minute+5*time.Minute {
		t.Errorf("asked for a minute, got %v", life)
	}
}

func TestDelegationRestriction(t *testing.T) {
	f := setup(t)
	for _, tc := range []struct {
		ask, grant, want []string
	}{
		{nil, nil, nil},
		{[]string{"xfer"}, nil, []string{"xfer"}},
		{nil, []string{"xfer"}, []string{"xfer"}},
		{[]string{"perf", "xfer"}, []string{"socks", "xfer"}, []string{"xfer"}},
	} {
		pending, req, err := NewRequest(0, tc.ask)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Restrict, tc.ask) {
			t.Errorf("request restriction %v, want %v", r.Restrict, tc.ask)
		}
		a, err := Delegate(f.alice, r, Options{Restrict: tc.grant})
		if err != nil {
			t.Fatalf("ask %v grant %v: %v", tc.ask, tc.grant, err)
		}
		got, err := pending.Accept(a)
		if err != nil {
			t.Fatal(err)
		}
		info, _, _ := Of(got.Leaf())
		if !slices.Equal(info.Services, tc.want) {
			t.Errorf("ask %v grant %v: got %v, want %v", tc.ask, tc.grant, info.Services, tc.want)
		}
	}
	_, req, _ := NewRequest(0, []string{"perf"})
	r, _ := ParseRequest(req)
	if _, err := Delegate(f.alice, r, Options{Restrict: []string{"xfer"}}); err == nil {
		t.Error("granted a service neither side allows")
	}
	if _, err := Delegate(f.alice, r, Options{Independent: true}); err == nil {
		t.Error("restricted request granted as independent")
	}
	if _, err := Delegate(f.alice, nil, Options{}); err == nil {
		t.Error("nil request")
	}
}

func TestAcceptRefuses(t *testing.T) {
	f := setup(t)
	pending, _, _ := NewRequest(0, nil)
	_, req, _ := NewRequest(0, nil) // someone else's key
	r, _ := ParseRequest(req)
	other, err := Delegate(f.alice, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Accept(other); err == nil {
		t.Error("accepted a proxy for another key")
	}
	// An answer holding a certificate that is not a proxy.
	notProxy, _ := marshalAnswer([]*x509.Certificate{f.alice.Leaf()})
	if _, err := pending.Accept(notProxy); err == nil {
		t.Error("accepted a user certificate")
	}
	// A proxy for the key, without its issuer.
	p, _ := Issue(f.alice, pending.key.Public(), Options{})
	alone, _ := marshalAnswer([]*x509.Certificate{p})
	if _, err := pending.Accept(alone); err == nil {
		t.Error("accepted a proxy without its issuer")
	}
	if _, err := pending.Accept([]byte("GLDA")); err == nil {
		t.Error("accepted a truncated answer")
	}
}

func TestRequestECDSA(t *testing.T) {
	for _, curve := range []elliptic.Curve{elliptic.P256(), elliptic.P384()} {
		k, _ := ecdsa.GenerateKey(curve, rand.Reader)
		req := Request{Key: k.Public(), Lifetime: time.Hour}
		body, err := requestBody(&req)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := signProof(k, body)
		if err != nil {
			t.Fatal(err)
		}
		var b cryptobyte.Builder
		b.AddBytes(body)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(proof) })
		r, err := ParseRequest(b.BytesOrPanic())
		if err != nil || r.Lifetime != time.Hour {
			t.Errorf("%s: %+v, %v", curve.Params().Name, r, err)
		}
	}
}

func TestParseRequestStrict(t *testing.T) {
	_, good, err := NewRequest(time.Hour, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRequest(good); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	for name, data := range map[string][]byte{
		"empty":      nil,
		"magic":      flip(0),
		"version":    flip(4),
		"key":        flip(8 + 12), // inside the Ed25519 key's bytes
		"lifetime":   flip(len(good) - 66 - 4 - 1 - 4),
		"proof":      flip(len(good) - 1),
		"trailing":   append(bytes.Clone(good), 0),
		"truncated":  good[:len(good)-1],
		"body alone": good[:len(good)-66],
	} {
		if _, err := ParseRequest(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, _, err := NewRequest(-time.Second, nil); err == nil {
		t.Error("negative lifetime")
	}
	if _, _, err := NewRequest(0, []string{"no way"}); err == nil {
		t.Error("bad service")
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, r := range [][]string{nil, {"xfer"}, {"a", "b", "c"}, {"port-2811@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"}} {
		_, req, err := NewRequest(time.Hour, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(req)
	}
	f.Add([]byte("GLDQ\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRequest(data)
		if err != nil {
			return
		}
		body, err := requestBody(r)
		if err != nil {
			t.Fatalf("decoded request does not encode: %v", err)
		}
		if !bytes.HasPrefix(data, body) {
			t.Fatalf("%x decodes to %+v, whose body encodes to %x", data, r, body)
		}
		if !verifyProof(r.Key, body, data[len(body)+2:]) {
			t.Fatal("accepted a request whose proof does not verify")
		}
	})
}

func FuzzParseAnswer(f *testing.F) {
	fx := setup(f)
	p, _ := New(fx.alice, Options{})
	a, _ := marshalAnswer(p.Chain)
	f.Add(a)
	f.Add([]byte("GLDA\x01\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		chain, err := ParseAnswer(data)
		if err != nil {
			return
		}
		again, err := marshalAnswer(chain)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("%x decodes to %d certificates, which encode to %x (%v)", data, len(chain), again, err)
		}
	})
}
