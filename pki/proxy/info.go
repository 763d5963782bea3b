package proxy

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	encasn1 "encoding/asn1"
	"errors"
	"fmt"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// OIDProxyCertInfo is the RFC 3820 ProxyCertInfo extension, critical in
// every proxy certificate:
//
//	ProxyCertInfo ::= SEQUENCE {
//	    pCPathLenConstraint  INTEGER (0..MAX) OPTIONAL,
//	    proxyPolicy          ProxyPolicy }
//	ProxyPolicy ::= SEQUENCE {
//	    policyLanguage       OBJECT IDENTIFIER,
//	    policy               OCTET STRING OPTIONAL }
//
// pCPathLenConstraint is how many proxies may follow this one in a chain.
// The policy languages gridlink writes and understands are
// id-ppl-inheritAll and id-ppl-independent (RFC 3820 §3.8, no policy) and
// its own restriction language RestrictedLanguage, whose policy is
//
//	Services ::= SEQUENCE SIZE (1..MaxServices) OF UTF8String
//
// restriction entries, sorted (byte order) and without repeats: the proxy
// stands for its user only towards what they name. An entry is
//
//	SERVICE            the service at any node
//	SERVICE@NODEID     the service at the one node whose identity key is NODEID
//
// SERVICE is a service name (a letter, then letters, digits and '-', at
// most 32: the service part of a virtual address, "echo" or "port-N"),
// NODEID a node's ID in its full text form (52 lower-case base32
// characters, canonical: identity.ID.String). Entries of the first form,
// the only one before targets were added, keep their meaning. See
// restrict.go for the matching and narrowing rules.
var OIDProxyCertInfo = encasn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}

// Policy language OIDs (dotted).
const (
	InheritAllLanguage  = "1.3.6.1.5.5.7.21.1"
	IndependentLanguage = "1.3.6.1.5.5.7.21.2"
	// RestrictedLanguage is gridlink's, under the arc 2.25.UUID that
	// ITU-T X.667 lets anyone take from a random UUID
	// (5d2fcc96-5f0a-45e7-9d16-f4face9e1dbe); arc .1 of it.
	RestrictedLanguage = "2.25.123866391085545330466040745128915508670.1"
)

// MaxServices bounds a restriction's list; MaxPathLen the pCPathLenConstraint
// a decoder accepts.
const (
	MaxServices = 16
	MaxPathLen  = 1 << 16
)

// Policy is a proxy's policy: what rights of its issuer it carries.
type Policy int

// The policies.
const (
	InheritAll  Policy = iota // id-ppl-inheritAll: all of its issuer's rights
	Independent               // id-ppl-independent: none of its issuer's rights
	Restricted                // RestrictedLanguage: its issuer's, towards the listed services only
	OtherPolicy               // a language gridlink does not know (Info.Language); verifiers refuse it
)

func (p Policy) String() string {
	switch p {
	case InheritAll:
		return "inheritAll"
	case Independent:
		return "independent"
	case Restricted:
		return "restricted"
	}
	return "unknown"
}

// Info is a decoded ProxyCertInfo.
type Info struct {
	// HasPathLen says whether the extension limits the proxies that may
	// follow this one, to PathLen (0: none may).
	HasPathLen bool
	PathLen    int
	Policy     Policy
	// Services lists the entries of a Restricted policy (sorted): SERVICE
	// or SERVICE@NODEID (see OIDProxyCertInfo).
	Services []string
	// Language is the policy language's OID.
	Language string
}

var (
	langInheritAll  = oidDER(InheritAllLanguage)
	langIndependent = oidDER(IndependentLanguage)
	langRestricted  = oidDER(RestrictedLanguage)
)

func oidDER(dotted string) []byte {
	oid, err := x509.ParseOID(dotted)
	if err != nil {
		panic(err)
	}
	b, err := oid.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

// Marshal encodes the extension's value (DER).
func (i Info) Marshal() ([]byte, error) {
	var lang, policy []byte
	switch i.Policy {
	case InheritAll:
		lang = langInheritAll
	case Independent:
		lang = langIndependent
	case Restricted:
		lang = langRestricted
		svc, err := normServices(i.Services)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		var b cryptobyte.Builder
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			for _, s := range svc {
				b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(s)) })
			}
		})
		policy = b.BytesOrPanic()
	default:
		return nil, fmt.Errorf("proxy: cannot write policy %v", i.Policy)
	}
	if i.Policy != Restricted && len(i.Services) > 0 {
		return nil, fmt.Errorf("proxy: services given with policy %v", i.Policy)
	}
	if i.HasPathLen && (i.PathLen < 0 || i.PathLen > MaxPathLen) {
		return nil, fmt.Errorf("proxy: path length %d out of range 0..%d", i.PathLen, MaxPathLen)
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		if i.HasPathLen {
			b.AddASN1Int64(int64(i.PathLen))
		}
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.OBJECT_IDENTIFIER, func(b *cryptobyte.Builder) { b.AddBytes(lang) })
			if policy != nil {
				b.AddASN1OctetString(policy)
			}
		})
	})
	return b.Bytes()
}

// Extension is the critical certificate extension carrying i.
func (i Info) Extension() (pkix.Extension, error) {
	v, err := i.Marshal()
	if err != nil {
		return pkix.Extension{}, err
	}
	return pkix.Extension{Id: OIDProxyCertInfo, Critical: true, Value: v}, nil
}

var errInfo = errors.New("proxy: malformed ProxyCertInfo")

// ParseInfo decodes an extension value strictly (DER, no trailing bytes,
// no policy with inheritAll or independent, a well-formed restriction).
// An unknown language decodes as OtherPolicy.
func ParseInfo(der []byte) (Info, error) {
	var info Info
	in := cryptobyte.String(der)
	var seq, pol, lang cryptobyte.String
	if !in.ReadASN1(&seq, asn1.SEQUENCE) || !in.Empty() {
		return info, errInfo
	}
	if seq.PeekASN1Tag(asn1.INTEGER) {
		var n int64
		if !seq.ReadASN1Integer(&n) || n < 0 || n > MaxPathLen {
			return info, fmt.Errorf("%w: bad pCPathLenConstraint", errInfo)
		}
		info.HasPathLen, info.PathLen = true, int(n)
	}
	if !seq.ReadASN1(&pol, asn1.SEQUENCE) || !seq.Empty() {
		return info, errInfo
	}
	if !pol.ReadASN1(&lang, asn1.OBJECT_IDENTIFIER) {
		return info, fmt.Errorf("%w: no policy language", errInfo)
	}
	var oid x509.OID
	if err := oid.UnmarshalBinary(lang); err != nil {
		return info, fmt.Errorf("%w: bad policy language OID", errInfo)
	}
	info.Language = oid.String()
	var policy []byte
	hasPolicy := !pol.Empty()
	if hasPolicy && (!pol.ReadASN1Bytes(&policy, asn1.OCTET_STRING) || !pol.Empty()) {
		return info, fmt.Errorf("%w: bad policy", errInfo)
	}
	switch {
	case bytes.Equal(lang, langInheritAll), bytes.Equal(lang, langIndependent):
		info.Policy = InheritAll
		if bytes.Equal(lang, langIndependent) {
			info.Policy = Independent
		}
		if hasPolicy {
			return info, fmt.Errorf("%w: policy %v carries a policy value", errInfo, info.Policy)
		}
	case bytes.Equal(lang, langRestricted):
		info.Policy = Restricted
		if !hasPolicy {
			return info, fmt.Errorf("%w: restricted policy without services", errInfo)
		}
		svc, err := parseServices(policy)
		if err != nil {
			return info, fmt.Errorf("%w: %v", errInfo, err)
		}
		info.Services = svc
	default:
		info.Policy = OtherPolicy
	}
	return info, nil
}

func parseServices(der []byte) ([]string, error) {
	in := cryptobyte.String(der)
	var seq cryptobyte.String
	if !in.ReadASN1(&seq, asn1.SEQUENCE) || !in.Empty() {
		return nil, errors.New("restriction is not a SEQUENCE")
	}
	var out []string
	for !seq.Empty() {
		var s cryptobyte.String
		if !seq.ReadASN1(&s, asn1.UTF8String) {
			return nil, errors.New("restriction holds a non-UTF8String")
		}
		name := string(s)
		if err := checkEntry(name); err != nil {
			return nil, err
		}
		if len(out) > 0 && out[len(out)-1] >= name {
			return nil, errors.New("restriction not sorted or with repeats")
		}
		if len(out) == MaxServices {
			return nil, fmt.Errorf("restriction of more than %d services", MaxServices)
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, errors.New("restriction lists no service")
	}
	return out, nil
}

// Of returns the ProxyCertInfo of cert and whether it has one (whether it
// is a proxy certificate). A ProxyCertInfo that is not critical or does not
// decode is an error.
func Of(cert *x509.Certificate) (Info, bool, error) {
	found := false
	var info Info
	for _, e := range cert.Extensions {
		if !e.Id.Equal(OIDProxyCertInfo) {
			continue
		}
		if found {
			return info, true, errors.New("proxy: two ProxyCertInfo extensions")
		}
		found = true
		if !e.Critical {
			return info, true, errors.New("proxy: ProxyCertInfo extension is not critical")
		}
		var err error
		if info, err = ParseInfo(e.Value); err != nil {
			return info, true, err
		}
	}
	return info, found, nil
}
