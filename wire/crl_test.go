package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// A KCRL message carries a list of 1 to MaxCRL bytes and is never routed.
func TestCRLMessage(t *testing.T) {
	m := testMachine()
	der := bytes.Repeat([]byte{0x30}, 300)
	got, err := Decode(Encode(&Message{Kind: KCRL, CRL: &CRL{DER: der}}))
	if err != nil || !bytes.Equal(got.CRL.DER, der) {
		t.Fatalf("round trip: %v", err)
	}
	for name, msg := range map[string]*Message{
		"empty":     {Kind: KCRL, CRL: &CRL{}},
		"too large": {Kind: KCRL, CRL: &CRL{DER: make([]byte, MaxCRL+1)}},
		"no body":   {Kind: KCRL, Machine: &m},
		"routed":    {Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, TTL: 1, Msg: &Message{Kind: KCRL, CRL: &CRL{DER: der}}}},
	} {
		_, err := Decode(Encode(msg))
		if !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
	// The largest list fits in one control frame.
	if n := len(Encode(&Message{Kind: KCRL, CRL: &CRL{DER: make([]byte, MaxCRL)}})); n > MaxPayload {
		t.Errorf("a KCRL message with the largest list is %d bytes, more than a frame's %d", n, MaxPayload)
	}
	if _, err := Decode([]byte(`{"kind":"crl","crl":{"der":"MA==","number":1}}`)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("unknown field: %v", err)
	}
}
