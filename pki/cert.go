package pki

import (
	"crypto/ed25519"
	"crypto/x509"
	"fmt"

	"github.com/gridlink/gridlink/identity"
)

// idFromCert returns the ID of the Ed25519 key a certificate certifies.
func idFromCert(cert *x509.Certificate) (identity.ID, error) {
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return identity.ID{}, fmt.Errorf("peer certificate has a %T key, want Ed25519", cert.PublicKey)
	}
	return identity.IDFromPublicKey(pub)
}
