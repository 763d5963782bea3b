package proxy

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

func TestInfoRoundTrip(t *testing.T) {
	for _, in := range []Info{
		{Policy: InheritAll},
		{Policy: Independent},
		{HasPathLen: true, PathLen: 0, Policy: InheritAll},
		{HasPathLen: true, PathLen: 3, Policy: Restricted, Services: []string{"a", "xfer"}},
		{HasPathLen: true, PathLen: MaxPathLen, Policy: Independent},
	} {
		der, err := in.Marshal()
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		out, err := ParseInfo(der)
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		in.Language = map[Policy]string{InheritAll: InheritAllLanguage, Independent: IndependentLanguage, Restricted: RestrictedLanguage}[in.Policy]
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip %+v → %+v", in, out)
		}
	}
}

// TestInfoKnownEncoding pins the encoding of inheritAll with a path length
// of 1 (the form Globus writes).
func TestInfoKnownEncoding(t *testing.T) {
	der, err := Info{HasPathLen: true, PathLen: 1, Policy: InheritAll}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(der), "300f020101300a06082b06010505071501"; got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
}

func TestInfoMarshalRefuses(t *testing.T) {
	for _, in := range []Info{
		{Policy: OtherPolicy},
		{Policy: Restricted},
		{Policy: Restricted, Services: []string{"bad name"}},
		{Policy: InheritAll, Services: []string{"x"}},
		{HasPathLen: true, PathLen: -1},
		{HasPathLen: true, PathLen: MaxPathLen + 1},
	} {
		if _, err := in.Marshal(); err == nil {
			t.Errorf("%+v marshalled", in)
		}
	}
}

// info builds a ProxyCertInfo by hand, for the decoder's failure paths.
func info(pathLen []byte, lang []byte, policy []byte, extra []byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(pathLen)
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.OBJECT_IDENTIFIER, func(b *cryptobyte.Builder) { b.AddBytes(lang) })
			if policy != nil {
				b.AddASN1OctetString(policy)
			}
		})
		b.AddBytes(extra)
	})
	return b.BytesOrPanic()
}

func services(names ...string) []byte {
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
		}
	})
	return b.BytesOrPanic()
}

func TestParseInfoStrict(t *testing.T) {
	good := info(nil, langInheritAll, nil, nil)
	if _, err := ParseInfo(good); err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxServices+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("a", i)
	}
	for name, der := range map[string][]byte{
		"empty":              nil,
		"trailing":           append(bytes.Clone(good), 0),
		"negative path":      info([]byte{2, 1, 0xff}, langInheritAll, nil, nil),
		"non-minimal path":   info([]byte{2, 2, 0, 1}, langInheritAll, nil, nil),
		"huge path":          info([]byte{2, 4, 0x7f, 0xff, 0xff, 0xff}, langInheritAll, nil, nil),
		"extra field":        info(nil, langInheritAll, nil, []byte{5, 0}),
		"inheritAll+policy":  info(nil, langInheritAll, []byte("x"), nil),
		"independent+policy": info(nil, langIndependent, []byte{}, nil),
		"restricted, none":   info(nil, langRestricted, nil, nil),
		"restricted, empty":  info(nil, langRestricted, services(), nil),
		"unsorted":           info(nil, langRestricted, services("b", "a"), nil),
		"repeated":           info(nil, langRestricted, services("a", "a"), nil),
		"bad name":           info(nil, langRestricted, services("a b"), nil),
		"too many":           info(nil, langRestricted, services(many...), nil),
		"not a sequence":     info(nil, langRestricted, []byte{4, 1, 'a'}, nil),
		"bad OID":            info(nil, []byte{0x80}, nil, nil),
		"empty OID":          info(nil, nil, nil, nil),
	} {
		if i, err := ParseInfo(der); err == nil {
			t.Errorf("%s: parsed as %+v", name, i)
		}
	}
	// A language gridlink does not know decodes, as OtherPolicy.
	other := info([]byte{2, 1, 5}, oidDER("1.3.6.1.5.5.7.21.0"), []byte("anything"), nil)
	if i, err := ParseInfo(other); err != nil || i.Policy != OtherPolicy || i.Language != "1.3.6.1.5.5.7.21.0" || i.PathLen != 5 {
		t.Errorf("other language: %+v, %v", i, err)
	}
}

func FuzzParseInfo(f *testing.F) {
	for _, in := range []Info{
		{Policy: InheritAll},
		{HasPathLen: true, PathLen: 2, Policy: Independent},
		{Policy: Restricted, Services: []string{"a", "b-1", "xfer"}},
		{Policy: Restricted, Services: []string{"port-2811", "port-2811@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"}},
	} {
		der, _ := in.Marshal()
		f.Add(der)
	}
	f.Add(info(nil, oidDER("1.2.3"), []byte("x"), nil))
	f.Fuzz(func(t *testing.T, der []byte) {
		in, err := ParseInfo(der)
		if err != nil || in.Policy == OtherPolicy {
			return
		}
		// What decodes re-encodes to the same bytes: one encoding each.
		again, err := in.Marshal()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", in, err)
		}
		if !bytes.Equal(again, der) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", der, in, again)
		}
	})
}
