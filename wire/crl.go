package wire

import "fmt"

// KCRL carries a revocation list from one hub to a neighbour hub (CRL),
// so that a list one hub takes reaches every hub at once instead of at
// each hub's next look at its own file. A hub sends each list it holds
// when a hub link comes up and whenever it takes a newer one; the
// receiver takes a list only if one of its own CAs signed it and its CRL
// number is higher than that of the list it holds from that CA, sends
// its own back if the sender's is older, and otherwise ignores it. Only
// hubs send it, only on their links to each other; it is never routed.
const KCRL = "crl"

// MaxCRL bounds a revocation list carried in a KCRL message (DER): with
// JSON's base64 it fits in one control frame (MaxPayload).
const MaxCRL = 512 << 10

// CRL is the body of a KCRL message: a revocation list as its CA signed
// it (X.509 CertificateList, DER; base64 in the JSON). Decode checks only
// its size; the receiver parses it and checks its signature and number.
type CRL struct {
	DER []byte `json:"der"`
}

func (c *CRL) check() error {
	if len(c.DER) == 0 || len(c.DER) > MaxCRL {
		return fmt.Errorf("revocation list of %d bytes, want 1 to %d", len(c.DER), MaxCRL)
	}
	return nil
}
