package chain

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/proxy"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// failure is one way a chain is wrong and how Verify must say so.
type failure struct {
	name   string
	chain  [][]byte
	v      *Verifier // nil: the world's
	at     time.Time // zero: the world's now
	reason error
	index  int
	text   string // in the error's text
}

func flipLast(der []byte) []byte {
	b := bytes.Clone(der)
	b[len(b)-1] ^= 1
	return b
}

func withExt(ext pkix.Extension) func(*x509.Certificate) {
	return func(c *x509.Certificate) { c.ExtraExtensions = []pkix.Extension{ext} }
}

func infoExt(t *testing.T, i proxy.Info) pkix.Extension {
	t.Helper()
	e, err := i.Extension()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// otherLanguage is a ProxyCertInfo with a policy language gridlink does not
// know.
func otherLanguage() pkix.Extension {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(asn1.ObjectIdentifier{1, 2, 3, 4})
			b.AddASN1OctetString([]byte("rights"))
		})
	})
	return pkix.Extension{Id: proxy.OIDProxyCertInfo, Critical: true, Value: b.BytesOrPanic()}
}

func failures(t *testing.T, w *world) []failure {
	now := w.now
	alice, bob := w.alice, w.bob
	p1 := mkProxy(t, alice, proxy.Options{Start: now})
	p2 := mkProxy(t, p1, proxy.Options{Start: now})
	cat := func(certs ...[]byte) [][]byte { return certs }
	a, pr1, pr2 := alice.Leaf().Raw, p1.Leaf().Raw, p2.Leaf().Raw

	foreign := w.user(t, w.other, "alice", now.Add(-time.Hour), 0)
	twin := w.user(t, w.twin, "alice", now.Add(-time.Hour), 0)
	expired := w.user(t, w.ca, "old", now.Add(-2*365*24*time.Hour), 365*24*time.Hour)
	early := w.user(t, w.ca, "early", now.Add(24*time.Hour), 0)
	revoked := w.user(t, w.ca, "mallory", now.Add(-time.Hour), 0)
	crl, err := w.ca.UpdateCRL(nil, ca.CRLUpdate{Revoke: []*big.Int{revoked.Leaf().SerialNumber}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	withCRL := w.verifier(t, Config{CRLs: []*x509.RevocationList{crl}})
	independentOK := w.verifier(t, Config{AllowIndependent: true})

	limit0 := mkProxy(t, alice, proxy.Options{LimitPath: true, PathLen: 0})
	limit1 := mkProxy(t, alice, proxy.Options{LimitPath: true, PathLen: 1})
	limit1b := mkProxy(t, limit1, proxy.Options{})
	restricted := mkProxy(t, alice, proxy.Options{Restrict: []string{"xfer"}})
	const nodeB, nodeC = "xfer@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa", "xfer@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaq"
	targeted := mkProxy(t, alice, proxy.Options{Restrict: []string{nodeB}})
	long := []*proxy.Credential{alice}
	for range DefaultMaxProxies + 1 {
		long = append(long, mkProxy(t, long[len(long)-1], proxy.Options{}))
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)

	return []failure{
		{name: "no certificate", chain: nil, reason: ErrNoCertificate, index: -1, text: "chain: no certificate"},
		{name: "empty certificate", chain: cat(nil), reason: ErrMalformed, index: 0, text: "certificate 1 of 1"},
		{name: "garbage after valid", chain: cat(pr1, a, []byte("junk")), reason: ErrMalformed, index: 2, text: "certificate 3 of 3"},
		{name: "too many certificates", chain: raw(long[len(long)-1]), reason: ErrMalformed, index: -1, text: "9 proxies, at most 8"},
		{name: "too many to parse", chain: append(raw(long[len(long)-1]), a, a), reason: ErrMalformed, index: -1, text: "more than"},

		// The end-entity certificate and its CA.
		{name: "another CA", chain: raw(foreign), reason: ErrUnknownCA, index: 0, text: "certificate not signed by a configured CA: its issuer CN=elsewhere CA"},
		{name: "self-signed", chain: raw(selfSigned(t, now)), reason: ErrUnknownCA, index: 0, text: "it is self-signed, so the peer holds no certificate from this grid's CA"},
		{name: "CA of the same name", chain: raw(twin), reason: ErrSignature, index: 0, text: "certificate not signed by a configured CA: its signature does not verify"},
		{name: "user signature flipped", chain: cat(flipLast(a)), reason: ErrSignature, index: 0, text: "not signed by a configured CA"},
		{name: "user signature flipped under proxy", chain: cat(pr1, flipLast(a)), reason: ErrSignature, index: 1, text: "end-entity certificate CN=alice,OU=user,O=grid"},
		{name: "user expired", chain: raw(expired), reason: ErrExpired, index: 0, text: "CN=old,OU=user,O=grid: expired at"},
		{name: "user not yet valid", chain: raw(early), reason: ErrNotYetValid, index: 0, text: "not valid before"},
		{name: "CA expired", chain: raw(alice), at: w.ca.Cert.NotAfter.Add(time.Second), reason: ErrExpired, index: -1, text: "CA CN=grid CA,O=grid: expired at"},
		{name: "CA expired, root sent", chain: cat(a, w.ca.Cert.Raw), at: w.ca.Cert.NotAfter.Add(time.Second), reason: ErrExpired, index: 1, text: "CA CN=grid CA,O=grid: expired"},
		{name: "revoked", chain: raw(revoked), v: withCRL, reason: ErrRevoked, index: 0, text: "revoked: serial " + revoked.Leaf().SerialNumber.String()},
		{name: "revoked user's proxy", chain: raw(mkProxy(t, revoked, proxy.Options{})), v: withCRL, reason: ErrRevoked, index: 1, text: "CN=mallory"},
		{name: "stale revocation list", chain: raw(alice), v: withCRL, at: crl.NextUpdate.Add(time.Second), reason: ErrStaleCRL, index: 0, text: "the CA must issue a new one"},
		{name: "sub-CA", chain: cat(a, w.other.Cert.Raw), reason: ErrUnknownCA, index: 1, text: "sub-CAs are not supported"},
		{name: "CA as end entity", chain: cat(w.ca.Cert.Raw), reason: ErrKeyUsage, index: 0, text: "is a CA certificate"},
		{name: "user without digitalSignature", chain: raw(w.craftEEC(t, nil, func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageKeyAgreement })),
			reason: ErrKeyUsage, index: 0, text: "lacks digitalSignature"},
		{name: "user with keyCertSign", chain: raw(w.craftEEC(t, nil, func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageCertSign })),
			reason: ErrKeyUsage, index: 0, text: "includes keyCertSign"},
		{name: "end entity marked CA", chain: raw(w.craftEEC(t, nil, func(c *x509.Certificate) { c.IsCA = true })),
			reason: ErrKeyUsage, index: 0, text: "is a CA certificate"},
		{name: "user without role", chain: raw(w.craftEEC(t, nil, func(c *x509.Certificate) { c.Subject.OrganizationalUnit = nil })),
			reason: ErrMalformed, index: 0, text: "no gridlink role"},
		{name: "user with unknown critical extension", chain: raw(w.craftEEC(t, nil, func(c *x509.Certificate) {
			c.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 2, 3, 4}, Critical: true, Value: []byte{5, 0}}}
		})), reason: ErrMalformed, index: 0, text: "fails X.509 path validation"},
		{name: "user with P-224 key", chain: raw(w.craftEEC(t, p224, nil)), reason: ErrAlgorithm, index: 0, text: "P-224"},

		// Order and completeness.
		{name: "missing user certificate", chain: cat(pr1), reason: ErrIncomplete, index: 0, text: "the chain ends at a proxy certificate"},
		{name: "missing middle proxy", chain: cat(pr2, a), reason: ErrIssuer, index: 0, text: "proxy 1: issued by"},
		{name: "swapped proxies", chain: cat(pr1, pr2, a), reason: ErrIssuer, index: 1, text: "a certificate is missing, extra or out of order"},
		{name: "other user's certificate", chain: cat(pr1, bob.Leaf().Raw), reason: ErrIssuer, index: 0, text: "not by CN=bob"},

		// Proxies.
		{name: "proxy signature flipped", chain: cat(flipLast(pr1), a), reason: ErrSignature, index: 0, text: "proxy 1: not signed by the key of its issuer"},
		{name: "leaf proxy signature flipped", chain: cat(flipLast(pr2), pr1, a), reason: ErrSignature, index: 0, text: "proxy 2: not signed"},
		{name: "proxy signed by the wrong user", chain: raw(w.craft(t, alice, bob.Key, nil)), reason: ErrSignature, index: 0, text: "proxy 1: not signed by the key of its issuer the end-entity certificate"},
		{name: "proxy expired", chain: raw(mkProxy(t, alice, proxy.Options{Start: now.Add(-13 * time.Hour)})), reason: ErrExpired, index: 0, text: "proxy 1: expired at"},
		{name: "proxy past its lifetime", chain: cat(pr1, a), at: p1.Leaf().NotAfter.Add(time.Second), reason: ErrExpired, index: 0, text: "proxy 1: expired at " + stamp(p1.Leaf().NotAfter)},
		{name: "middle proxy expired", chain: cat(pr2, pr1, a), at: p1.Leaf().NotAfter.Add(time.Second), reason: ErrExpired, index: 1, text: "proxy 1: expired"},
		{name: "proxy not yet valid", chain: raw(mkProxy(t, alice, proxy.Options{Start: now.Add(time.Hour)})), reason: ErrNotYetValid, index: 0, text: "proxy 1: not valid before"},
		{name: "proxy outlives its issuer", chain: raw(w.craft(t, p1, nil, func(c *x509.Certificate) { c.NotAfter = p1.Leaf().NotAfter.Add(time.Hour) })),
			reason: ErrLifetime, index: 0, text: "proxy 2: outlives its issuer"},
		{name: "proxy lives too long", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.NotAfter = now.Add(30 * 24 * time.Hour) })),
			reason: ErrLifetime, index: 0, text: "longer than the 168h0m0s a proxy may be"},
		{name: "path length 0 exceeded", chain: raw(w.craft(t, limit0, nil, nil)), reason: ErrPathLength, index: 0, text: "proxy 2: proxy 1 allows at most 0 proxies after it"},
		{name: "path length 1 exceeded", chain: raw(w.craft(t, limit1b, nil, nil)), reason: ErrPathLength, index: 0, text: "proxy 3: proxy 1 allows at most 1 proxies"},
		{name: "restricted parent, unrestricted child", chain: raw(w.craft(t, restricted, nil, nil)), reason: ErrPolicy, index: 0,
			text: "proxy 2: is unrestricted (inheritAll), but proxy 1 is restricted to [xfer]"},
		{name: "restricted parent, wider child", chain: raw(w.craft(t, restricted, nil, withExt(infoExt(t, proxy.Info{Policy: proxy.Restricted, Services: []string{"perf", "xfer"}})))),
			reason: ErrPolicy, index: 0, text: "allows [perf xfer], beyond the restriction of proxy 1 to [xfer]"},
		{name: "targeted parent, child for any node", chain: raw(w.craft(t, targeted, nil, withExt(infoExt(t, proxy.Info{Policy: proxy.Restricted, Services: []string{"xfer"}})))),
			reason: ErrPolicy, index: 0, text: "allows [xfer], beyond the restriction of proxy 1 to [" + nodeB + "]"},
		{name: "targeted parent, child for another node", chain: raw(w.craft(t, targeted, nil, withExt(infoExt(t, proxy.Info{Policy: proxy.Restricted, Services: []string{nodeC}})))),
			reason: ErrPolicy, index: 0, text: "allows [" + nodeC + "], beyond the restriction of proxy 1 to [" + nodeB + "]"},
		{name: "restricted parent, independent child", chain: raw(w.craft(t, restricted, nil, withExt(infoExt(t, proxy.Info{Policy: proxy.Independent})))),
			v: independentOK, reason: ErrPolicy, index: 0, text: "is independent, but proxy 1 is restricted"},
		{name: "independent refused", chain: raw(mkProxy(t, alice, proxy.Options{Independent: true})), reason: ErrPolicy, index: 0, text: "independent proxy"},
		{name: "unknown policy language", chain: raw(w.craft(t, alice, nil, withExt(otherLanguage()))), reason: ErrPolicy, index: 0, text: "policy language 1.2.3.4"},
		{name: "ProxyCertInfo not critical", chain: raw(w.craft(t, alice, nil, withExt(pkix.Extension{Id: proxy.OIDProxyCertInfo, Value: infoExt(t, proxy.Info{}).Value}))),
			reason: ErrMalformed, index: 0, text: "not critical"},
		{name: "ProxyCertInfo garbled", chain: raw(w.craft(t, alice, nil, withExt(pkix.Extension{Id: proxy.OIDProxyCertInfo, Critical: true, Value: []byte{0x30, 0}}))),
			reason: ErrMalformed, index: 0, text: "malformed ProxyCertInfo"},
		{name: "proxy with keyCertSign", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageCertSign })),
			reason: ErrKeyUsage, index: 0, text: "includes keyCertSign"},
		{name: "proxy without digitalSignature", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageKeyAgreement })),
			reason: ErrKeyUsage, index: 0, text: "lacks digitalSignature"},
		{name: "proxy marked CA", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.BasicConstraintsValid, c.IsCA = true, true })),
			reason: ErrKeyUsage, index: 0, text: "marked as a CA"},
		{name: "proxy with alternative name", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.DNSNames = []string{"x.example"} })),
			reason: ErrMalformed, index: 0, text: "alternative name"},
		{name: "proxy with unknown critical extension", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) {
			c.ExtraExtensions = append(c.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{1, 2, 3, 4}, Critical: true, Value: []byte{5, 0}})
		})), reason: ErrMalformed, index: 0, text: "unknown critical extension 1.2.3.4"},
		{name: "proxy subject with two CNs", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.RawSubject = appendCN(appendCN(alice.Leaf().RawSubject, "1"), "2") })),
			reason: ErrSubject, index: 0, text: "does not extend its issuer's"},
		{name: "proxy subject of another user", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.RawSubject = appendCN(bob.Leaf().RawSubject, "1") })),
			reason: ErrSubject, index: 0, text: "subject CN=1,CN=bob"},
		{name: "proxy subject not a CN", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) {
			c.RawSubject, c.Subject = nil, pkix.Name{Organization: []string{"grid"}, OrganizationalUnit: []string{"user"}, CommonName: "alice", SerialNumber: "1"}
		})), reason: ErrSubject, index: 0, text: "does not extend"},
		{name: "user signs an end-entity certificate", chain: raw(w.craft(t, alice, nil, func(c *x509.Certificate) { c.ExtraExtensions = nil })),
			reason: ErrNotProxy, index: 0, text: "is not a proxy certificate, yet it follows the end-entity certificate"},
		{name: "proxy signs an end-entity certificate", chain: raw(w.craft(t, p1, nil, func(c *x509.Certificate) { c.ExtraExtensions = nil })),
			reason: ErrNotProxy, index: 0, text: "yet it follows proxy 1"},
		{name: "node signs a proxy", chain: raw(w.craft(t, w.node, nil, nil)), reason: ErrKeyUsage, index: 0, text: "signed by a node certificate"},
	}
}

func TestFailures(t *testing.T) {
	w := newWorld(t)
	for _, f := range failures(t, w) {
		t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
			v, at := f.v, f.at
			if v == nil {
				v = w.v
			}
			if at.IsZero() {
				at = w.now
			}
			r, err := v.Verify(f.chain, at)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Verify = %+v, %v; want an *Error", r, err)
			}
			t.Log(err)
			if !errors.Is(err, f.reason) || e.Index != f.index || !strings.Contains(err.Error(), f.text) {
				t.Errorf("got %v (index %d, reason %v)\nwant reason %v, index %d, text %q", err, e.Index, e.Reason, f.reason, f.index, f.text)
			}
		})
	}
}

// selfSigned is what a hub or node of an open grid presents: a certificate
// for its key signed by that key, named by its ID.
func selfSigned(t testing.TB, now time.Time) *proxy.Credential {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bciyda6tabapt44qzbln2c2ewg7beadgav6cc34mcdvtjx4g437a"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	return issue(t, tmpl, tmpl, key, key)
}
