package ca

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
)

// Certificates of other CAs: a grid user's certificate from a CA of her
// federation (one of the dozens in a grid host's trust directory), which
// carries none of this package's layout. Such a certificate is a user's,
// named by its whole subject as Globus writes it (SubjectDN); nothing in
// it (OU, URIs) gives a role or gridlink groups, which only the grid's own
// CA certifies.

// ForeignAttributes are the attributes of an end-entity certificate that
// another CA issued: role user, Name its subject as Globus writes it
// (/DC=org/DC=example/CN=Alice Smith), no groups and no aliases.
func ForeignAttributes(cert *x509.Certificate) (Attributes, error) {
	name := SubjectDN(cert)
	if name == "" {
		return Attributes{}, fmt.Errorf("a certificate of %s with an empty subject", cert.Issuer)
	}
	return Attributes{Name: name, Role: User}, nil
}

// CheckIssuer reports whether cert can serve as a federation CA
// (chain.Config.UserCAs): a CA certificate whose key may sign
// certificates. Unlike a grid CA (CheckCA) it need not be self-issued nor
// sign revocation lists: a trust directory holds intermediate CAs too.
func CheckIssuer(cert *x509.Certificate) error {
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return fmt.Errorf("ca: %s is not a CA certificate", cert.Subject)
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Errorf("ca: %s may not sign certificates (key usage)", cert.Subject)
	}
	return nil
}

var attrNames = map[string]string{
	"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
	"2.5.4.11": "OU", "2.5.4.5": "serialNumber", "2.5.4.9": "street", "2.5.4.17": "postalCode",
	"0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
	"1.2.840.113549.1.9.1": "emailAddress",
}

// SubjectDN is cert's subject as Globus writes it (grid-mapfiles,
// grid-proxy-info): each attribute "/TYPE=VALUE" in the order the
// certificate holds them (/O=mygrid/OU=user/CN=alice).
func SubjectDN(cert *x509.Certificate) string {
	if s := NameDN(cert.RawSubject); s != "" {
		return s
	}
	return cert.Subject.String()
}

// NameDN is a DER Name as Globus writes it (SubjectDN), or "" if it does
// not decode.
func NameDN(raw []byte) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(raw, &seq); err != nil || len(rest) != 0 {
		return ""
	}
	var b bytes.Buffer
	for _, rdn := range seq {
		for _, atv := range rdn {
			name, ok := attrNames[atv.Type.String()]
			if !ok {
				name = atv.Type.String()
			}
			fmt.Fprintf(&b, "/%s=%v", name, atv.Value)
		}
	}
	return b.String()
}
