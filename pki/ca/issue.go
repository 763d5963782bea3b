package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// Role is what an end-entity certificate's holder is in the grid; it is the
// certificate's subject OU.
type Role string

// The roles.
const (
	Hub  Role = "hub"
	Node Role = "node"
	User Role = "user"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == Hub || r == Node || r == User }

// MinRSABits is the smallest RSA key a user's certificate may certify.
const MinRSABits = 2048

// Key sizes of the RSA keys made here.
const (
	UserRSABits = 2048 // NewUserKey's
	CARSABits   = 3072 // a new CA's: it signs for 10 years
)

// NewUserKey makes a user's key: RSA of UserRSABits. The Globus tools
// (grid-proxy-init, a GridFTP server taking a delegated proxy) sign only
// with RSA keys and size a proxy's key by its issuer's, so neither an
// ECDSA nor an Ed25519 key would do ("Certificate's signing algorithm not
// supported by OpenSSL").
func NewUserKey() (crypto.Signer, error) {
	return rsa.GenerateKey(rand.Reader, UserRSABits)
}

// MaxGroups bounds the groups of one certificate.
const MaxGroups = 64

// groupScheme is the URI scheme of the groups in the subject alternative
// name: gridlink:group:NAME.
const (
	groupScheme = "gridlink"
	groupPrefix = "group:"
)

// nameRE is the form of names (subject CN, groups, the grid's name).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}$`)

func checkName(s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("bad name %q: want 1-64 letters, digits and _.@+- (not first)", s)
	}
	return nil
}

// Request says what certificate to issue.
type Request struct {
	Role Role
	// Name identifies the holder within its role (the CN): a hub's or
	// node's name, a user's login name.
	Name string
	// Groups the holder belongs to, for access control (a service may
	// accept only some groups).
	Groups []string
	// Aliases are more names a hub or node may use besides Name (DNS
	// names in the subject alternative name; see pki.Peer.MayUse).
	Aliases []string
	// Key is the public key to certify. For a hub or node it is the
	// Ed25519 identity key (identity.ID.PublicKey()), so the certificate's
	// key is the node's ID; for a user an RSA (MinRSABits or more),
	// ECDSA (P-256, P-384) or Ed25519 key of the user's own (NewUserKey:
	// RSA, the one the Globus tools use).
	Key crypto.PublicKey
	// Start is when the certificate becomes valid (zero: now); it stays
	// valid for Lifetime (zero: DefaultLifetime), and never past the CA.
	Start    time.Time
	Lifetime time.Duration
}

// Issue signs an end-entity certificate: subject O=grid, OU=role, CN=name,
// groups as gridlink:group:NAME URIs, key usage digitalSignature, never a
// CA.
func (a *Authority) Issue(r Request) (*x509.Certificate, error) {
	if !r.Role.Valid() {
		return nil, fmt.Errorf("ca: bad role %q: want hub, node or user", r.Role)
	}
	if err := checkName(r.Name); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if err := checkMachineName(r.Role, r.Name); err != nil {
		return nil, err
	}
	groups, err := normGroups(r.Groups)
	if err != nil {
		return nil, err
	}
	if err := checkKey(r.Role, r.Key); err != nil {
		return nil, err
	}
	aliases, err := normAliases(r.Role, r.Aliases)
	if err != nil {
		return nil, err
	}
	if k, ok := r.Key.(interface{ Equal(crypto.PublicKey) bool }); ok && k.Equal(a.Cert.PublicKey) {
		return nil, errors.New("ca: refusing to certify the CA's own key")
	}
	start, end := validity(r.Start, r.Lifetime, DefaultLifetime)
	if end.After(a.Cert.NotAfter) {
		end = a.Cert.NotAfter
	}
	if !end.After(start) {
		return nil, fmt.Errorf("ca: the CA expires at %s, before the certificate would start", a.Cert.NotAfter)
	}
	serial, err := NewSerial()
	if err != nil {
		return nil, err
	}
	eku := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	if r.Role == User {
		eku = eku[:1]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{a.Name()}, OrganizationalUnit: []string{string(r.Role)}, CommonName: r.Name},
		NotBefore:             start,
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		IsCA:                  false,
		MaxPathLen:            -1,
	}
	tmpl.DNSNames = aliases
	for _, g := range groups {
		tmpl.URIs = append(tmpl.URIs, &url.URL{Scheme: groupScheme, Opaque: groupPrefix + g})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, r.Key, a.key)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return x509.ParseCertificate(der)
}

func normGroups(in []string) ([]string, error) {
	if len(in) > MaxGroups {
		return nil, fmt.Errorf("ca: %d groups, at most %d", len(in), MaxGroups)
	}
	out := slices.Clone(in)
	for _, g := range out {
		if err := checkName(g); err != nil {
			return nil, fmt.Errorf("ca: group: %w", err)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func normAliases(role Role, in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if role == User {
		return nil, errors.New("ca: a user certificate has no aliases (users name their nodes freely: see pki.Peer.MayUse)")
	}
	if len(in) > MaxGroups {
		return nil, fmt.Errorf("ca: %d aliases, at most %d", len(in), MaxGroups)
	}
	out := slices.Clone(in)
	for _, a := range out {
		if err := checkMachineName(role, a); err != nil {
			return nil, fmt.Errorf("ca: alias: %w", err)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// checkMachineName checks a name a hub's or node's certificate would
// certify: the name it goes by, so one a hub admits (identity.CheckName:
// no dot, '@', space or control character, at most 63 bytes). A user's
// CN is a login name (checkName), never a node's name.
func checkMachineName(role Role, name string) error {
	if role == User {
		return nil
	}
	if err := identity.CheckName(name); err != nil {
		return fmt.Errorf("ca: a %s certificate's name: %w", role, err)
	}
	return nil
}

func checkKey(role Role, key crypto.PublicKey) error {
	switch k := key.(type) {
	case ed25519.PublicKey:
		if len(k) == ed25519.PublicKeySize {
			return nil
		}
	case *ecdsa.PublicKey:
		if role != User {
			return fmt.Errorf("ca: a %s certificate certifies its Ed25519 identity key, not an ECDSA key", role)
		}
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
	case *rsa.PublicKey:
		if role != User {
			return fmt.Errorf("ca: a %s certificate certifies its Ed25519 identity key, not an RSA key", role)
		}
		if k.N.BitLen() >= MinRSABits {
			return nil
		}
		return fmt.Errorf("ca: cannot certify an RSA key of %d bits: want %d bits or more", k.N.BitLen(), MinRSABits)
	case nil:
		return errors.New("ca: no key to certify")
	}
	return fmt.Errorf("ca: cannot certify a %T key: want Ed25519 (or ECDSA P-256/P-384 or RSA for users)", key)
}

// Attributes are what an end-entity certificate says of its holder.
type Attributes struct {
	Name    string
	Role    Role
	Groups  []string // sorted
	Aliases []string // a hub's or node's other names (DNS SANs), sorted
}

// AttributesOf reads the name, role and groups of an end-entity certificate
// this package issued, or says why it does not have them.
func AttributesOf(cert *x509.Certificate) (Attributes, error) {
	var a Attributes
	ou := cert.Subject.OrganizationalUnit
	if len(ou) != 1 || !Role(ou[0]).Valid() {
		return a, fmt.Errorf("subject %s has no gridlink role (want exactly one OU of hub, node, user)", cert.Subject)
	}
	a.Role = Role(ou[0])
	a.Name = cert.Subject.CommonName
	if err := checkName(a.Name); err != nil {
		return a, fmt.Errorf("subject %s: CN: %w", cert.Subject, err)
	}
	for _, u := range cert.URIs {
		if u.Scheme != groupScheme {
			continue
		}
		g, ok := strings.CutPrefix(u.Opaque, groupPrefix)
		if !ok || checkName(g) != nil {
			return a, fmt.Errorf("bad group URI %q", u.String())
		}
		a.Groups = append(a.Groups, g)
	}
	if len(a.Groups) > MaxGroups {
		return a, fmt.Errorf("%d groups, at most %d", len(a.Groups), MaxGroups)
	}
	slices.Sort(a.Groups)
	a.Groups = slices.Compact(a.Groups)
	if a.Role != User {
		if len(cert.DNSNames) > MaxGroups {
			return a, fmt.Errorf("%d aliases, at most %d", len(cert.DNSNames), MaxGroups)
		}
		for _, n := range cert.DNSNames {
			if checkName(n) != nil {
				return a, fmt.Errorf("bad alias %q", n)
			}
			a.Aliases = append(a.Aliases, n)
		}
		slices.Sort(a.Aliases)
		a.Aliases = slices.Compact(a.Aliases)
	}
	if a.Role != User {
		if _, ok := cert.PublicKey.(ed25519.PublicKey); !ok {
			return a, fmt.Errorf("a %s certificate with a %T key, want Ed25519", a.Role, cert.PublicKey)
		}
	}
	return a, nil
}
