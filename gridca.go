package gridlink

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
)

// The grid's certificate authority, its certificates and users' proxies
// (`gridlink ca`, `cert`, `proxy`): a CA directory holds ca.pem (the
// certificate every hub and node is given), ca.key (kept offline,
// passphrase-protected) and crl.pem (the signed revocation list).

// Passphrase returns a key's passphrase (asked once).
type Passphrase func() ([]byte, error)

// CA directory file names.
const (
	CACertFile = ca.DirCert
	CAKeyFile  = ca.DirKey
	CACRLFile  = ca.DirCRL
)

// ErrCAExists refuses to overwrite a CA directory's key.
var ErrCAExists = errors.New("already holds a CA")

// CAExistsError says that a directory already holds a CA.
type CAExistsError struct{ Dir, Key string }

func (e *CAExistsError) Error() string {
	return fmt.Sprintf("%s already holds a CA (%s): refusing to overwrite it", e.Dir, e.Key)
}
func (e *CAExistsError) Unwrap() error { return ErrCAExists }

// CAConfig says what CA InitCA makes.
type CAConfig struct {
	Dir  string // its directory, made if missing (mode 0700)
	Name string // the grid's name, the certificates' organization (required)
	// Lifetime of the CA certificate; zero: pki/ca's DefaultCALifetime.
	Lifetime time.Duration
	// NewPassphrase is the new key's passphrase; nil: the key is stored
	// unprotected (labs and tests only).
	NewPassphrase Passphrase
}

// CAFiles are what InitCA made or RevokeCA wrote.
type CAFiles struct {
	Name           string // the CA's name
	Cert, Key, CRL string // file paths
	CRLNumber      *big.Int
	Revoked        int       // entries in the list
	NextUpdate     time.Time // the list must be re-signed before then
}

// InitCA makes a grid CA in a directory: its key, its self-signed
// certificate and an empty revocation list. It refuses a directory that
// already holds a CA key.
func InitCA(c CAConfig) (CAFiles, error) {
	keyPath := filepath.Join(c.Dir, ca.DirKey)
	if _, err := os.Stat(keyPath); err == nil {
		return CAFiles{}, &CAExistsError{Dir: c.Dir, Key: ca.DirKey}
	}
	a, err := ca.New(ca.Config{Name: c.Name, Lifetime: c.Lifetime})
	if err != nil {
		return CAFiles{}, err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return CAFiles{}, err
	}
	if err := writeKey(keyPath, a.Key(), c.NewPassphrase); err != nil {
		return CAFiles{}, err
	}
	crl, err := a.UpdateCRL(nil, ca.CRLUpdate{})
	if err != nil {
		return CAFiles{}, err
	}
	f := CAFiles{Name: a.Name(), Cert: filepath.Join(c.Dir, ca.DirCert), Key: keyPath, CRL: filepath.Join(c.Dir, ca.DirCRL),
		CRLNumber: crl.Number, NextUpdate: crl.NextUpdate}
	if err := os.WriteFile(f.Cert, ca.EncodeCertificates(a.Cert), 0o644); err != nil {
		return CAFiles{}, err
	}
	if err := os.WriteFile(f.CRL, ca.EncodeCRL(crl), 0o644); err != nil {
		return CAFiles{}, err
	}
	return f, nil
}

// writeKey writes key to path, protected by pass's passphrase, or
// unprotected if pass is nil.
func writeKey(path string, key crypto.Signer, pass Passphrase) error {
	var data []byte
	var err error
	if pass == nil {
		data, err = keyfile.Marshal(key)
	} else {
		var p []byte
		if p, err = pass(); err != nil {
			return err
		}
		data, err = keyfile.Encrypt(key, p, keyfile.DefaultCost)
	}
	if err != nil {
		return err
	}
	return keyfile.Write(path, data)
}

// loadCA loads the CA of a directory made by InitCA.
func loadCA(dir string, pass Passphrase) (*ca.Authority, error) {
	data, err := os.ReadFile(filepath.Join(dir, ca.DirCert))
	if err != nil {
		return nil, err
	}
	certs, err := ca.ParseCertificates(data)
	if err != nil {
		return nil, err
	}
	key, err := keyfile.Load(filepath.Join(dir, ca.DirKey), pass)
	if err != nil {
		return nil, err
	}
	return ca.Load(certs[0], key)
}

// RevokeCA revokes the certificates in certFiles and those of serials,
// and re-signs the CA's revocation list (with none, just re-signs it),
// replacing crl.pem at once.
func RevokeCA(dir string, pass Passphrase, certFiles []string, serials []*big.Int) (CAFiles, error) {
	a, err := loadCA(dir, pass)
	if err != nil {
		return CAFiles{}, err
	}
	revoke := append([]*big.Int(nil), serials...)
	for _, f := range certFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return CAFiles{}, err
		}
		certs, err := ca.ParseCertificates(data)
		if err != nil {
			return CAFiles{}, fmt.Errorf("%s: %w", f, err)
		}
		revoke = append(revoke, certs[0].SerialNumber)
	}
	path := filepath.Join(dir, ca.DirCRL)
	var prev *x509.RevocationList
	if data, err := os.ReadFile(path); err == nil {
		if prev, err = ca.ParseCRL(data); err != nil {
			return CAFiles{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	crl, err := a.UpdateCRL(prev, ca.CRLUpdate{Revoke: revoke})
	if err != nil {
		return CAFiles{}, err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, ca.EncodeCRL(crl), 0o644); err != nil {
		return CAFiles{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return CAFiles{}, err
	}
	return CAFiles{Name: a.Name(), Cert: filepath.Join(dir, ca.DirCert), Key: filepath.Join(dir, ca.DirKey), CRL: path,
		CRLNumber: crl.Number, Revoked: len(crl.RevokedCertificateEntries), NextUpdate: crl.NextUpdate}, nil
}

// CertRequest asks for a hub's, node's or user's certificate.
type CertRequest struct {
	Dir          string     // the CA's directory
	CAPassphrase Passphrase // the CA key's
	Role         string     // hub, node or user
	Name         string     // the hub's or node's name, or the user's login
	Groups       []string   // groups the holder belongs to (access control)
	Aliases      []string   // other names a hub or node may use
	Lifetime     time.Duration
	// KeyFile is the key to certify: a hub's or node's identity key file
	// (made if missing), or a user's key file (made if missing, protected
	// by NewUserPassphrase, unprotected if that is nil); ID, instead, a
	// hub's or node's ID.
	KeyFile, ID                       string
	UserPassphrase, NewUserPassphrase Passphrase
	Out                               string // the certificate file to write
}

// Issued is a certificate IssueCert wrote.
type Issued struct {
	Out      string
	Subject  string
	Serial   *big.Int
	NotAfter time.Time
	// MadeKey is the user key file IssueCert made, if any (set also when
	// issuing then failed).
	MadeKey string
}

// Why a certificate request cannot be issued.
var (
	ErrUserKeyNeeded = errors.New("a user certificate needs the user's key file (made, passphrase-protected, if missing)")
	ErrKeyNeeded     = errors.New("a hub or node certificate needs its identity key file (made if missing) or its ID")
)

// IssueCert issues a certificate signed by the CA and writes it.
func IssueCert(r CertRequest) (Issued, error) {
	var out Issued
	if r.Lifetime <= 0 {
		return out, fmt.Errorf("certificate lifetime %v: want a positive lifetime", r.Lifetime)
	}
	a, err := loadCA(r.Dir, r.CAPassphrase)
	if err != nil {
		return out, err
	}
	req := ca.Request{Role: ca.Role(r.Role), Name: r.Name, Groups: r.Groups, Aliases: r.Aliases, Lifetime: r.Lifetime}
	switch {
	case req.Role == ca.User:
		if r.KeyFile == "" {
			return out, ErrUserKeyNeeded
		}
		key, err := keyfile.Load(r.KeyFile, r.UserPassphrase)
		if errors.Is(err, os.ErrNotExist) {
			_, priv, gerr := ed25519.GenerateKey(nil)
			if gerr != nil {
				return out, gerr
			}
			if err = writeKey(r.KeyFile, priv, r.NewUserPassphrase); err == nil {
				key = priv
				out.MadeKey = r.KeyFile
			}
		}
		if err != nil {
			return out, err
		}
		req.Key = key.Public()
	case r.ID != "":
		id, err := identity.ParseID(r.ID)
		if err != nil {
			return out, err
		}
		req.Key = id.PublicKey()
	case r.KeyFile != "":
		k, err := identity.LoadOrCreateKey(r.KeyFile)
		if err != nil {
			return out, err
		}
		req.Key = k.Private().Public()
	default:
		return out, ErrKeyNeeded
	}
	cert, err := a.Issue(req)
	if err != nil {
		return out, err
	}
	if err := os.WriteFile(r.Out, ca.EncodeCertificates(cert), 0o644); err != nil {
		return out, err
	}
	out.Out, out.Subject, out.Serial, out.NotAfter = r.Out, cert.Subject.String(), cert.SerialNumber, cert.NotAfter
	return out, nil
}

// DefaultMaxProxyLifetime is the longest lifetime of a proxy InitProxy
// makes unless told otherwise, and the longest hubs and nodes admit.
const DefaultMaxProxyLifetime = proxy.DefaultMaxLifetime

// DefaultProxyFile is where InitProxy writes and nodes look: like
// Globus's /tmp/x509up_uUID, but in the user's own directory
// (~/.gridlink/proxy.pem).
func DefaultProxyFile() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".gridlink", "proxy.pem")
}

// ProxyRequest asks for a proxy of a user's certificate.
type ProxyRequest struct {
	CertFile, KeyFile string
	Passphrase        Passphrase // the user key's
	Out               string     // the proxy credential file (mode 0600); empty: DefaultProxyFile
	// Lifetime and the longest one allowed (zero: DefaultMaxProxyLifetime).
	Lifetime, MaxLifetime time.Duration
	// Restrict limits the proxy to these services (CheckRestriction); none:
	// unrestricted.
	Restrict []string
	// NewKey makes a new key even when Out holds a proxy of the same user
	// certificate, whose key is otherwise kept: a running agent renews
	// into the new proxy only for the key it has (its identity).
	NewKey bool
}

// Proxy is a proxy InitProxy wrote.
type Proxy struct {
	Out      string
	Subject  string
	NotAfter time.Time
}

// InitProxy makes a proxy certificate signed by the user's certificate and
// writes it with its key.
func InitProxy(r ProxyRequest) (Proxy, error) {
	for _, e := range r.Restrict {
		if err := CheckRestriction(e); err != nil {
			return Proxy{}, err
		}
	}
	if r.Out == "" {
		r.Out = DefaultProxyFile()
	}
	data, err := os.ReadFile(r.CertFile)
	if err != nil {
		return Proxy{}, err
	}
	chain, err := ca.ParseCertificates(data)
	if err != nil {
		return Proxy{}, fmt.Errorf("%s: %w", r.CertFile, err)
	}
	key, err := keyfile.Load(r.KeyFile, r.Passphrase)
	if err != nil {
		return Proxy{}, err
	}
	o := proxy.Options{Lifetime: r.Lifetime, MaxLifetime: r.MaxLifetime}
	if len(r.Restrict) > 0 {
		o.Restrict = r.Restrict
	}
	user := &proxy.Credential{Chain: chain, Key: key}
	var p *proxy.Credential
	if !r.NewKey {
		p, err = renewProxy(r.Out, user, o)
	}
	if err == nil && p == nil {
		p, err = proxy.New(user, o)
	}
	if err != nil {
		return Proxy{}, err
	}
	if err := os.MkdirAll(filepath.Dir(r.Out), 0o700); err != nil {
		return Proxy{}, err
	}
	if err := proxy.Save(r.Out, p); err != nil {
		return Proxy{}, err
	}
	return Proxy{Out: r.Out, Subject: p.Leaf().Subject.String(), NotAfter: p.Leaf().NotAfter}, nil
}

// renewProxy makes a proxy for the key of the proxy of user already in
// file, so that an agent running with it keeps its identity (the proxy's
// key is the node's) and takes the new proxy without a restart
// (credwatch.go); nil when the file holds no proxy of user's.
func renewProxy(file string, user *proxy.Credential, o proxy.Options) (*proxy.Credential, error) {
	old, err := proxy.Load(file)
	if err != nil || len(old.Chain) < 2 || !old.Chain[1].Equal(user.Chain[0]) {
		return nil, nil // none to renew: a new key
	}
	cert, err := proxy.Issue(user, old.Key.Public(), o)
	if err != nil {
		return nil, err
	}
	return &proxy.Credential{Chain: append([]*x509.Certificate{cert}, user.Chain...), Key: old.Key}, nil
}

// RestrictionError is an entry of a proxy's restriction that names no
// service restrictions can name.
type RestrictionError struct {
	Entry string
	Err   error
}

func (e *RestrictionError) Error() string { return e.Err.Error() }
func (e *RestrictionError) Unwrap() error { return e.Err }

// DashboardService is the name proxy restrictions give a dashboard's
// members' listener (gridlink dashboard --members): not a virtual port,
// but a service a proxy may be restricted to all the same.
const DashboardService = "dashboard"

// CheckRestriction checks an entry of a proxy's restriction: a service
// restrictions can name (echo, port-N, dashboard), alone or as
// SERVICE@NODEID.
func CheckRestriction(e string) error {
	svc, _ := proxy.SplitEntry(e)
	if _, err := vconn.ParseService(svc); err != nil && svc != DashboardService {
		return &RestrictionError{Entry: e, Err: fmt.Errorf("%w; or %s (a dashboard's members); SERVICE@NODEID limits it to the node with that ID", err, DashboardService)}
	}
	if err := proxy.CheckEntry(e); err != nil {
		return &RestrictionError{Entry: e, Err: err}
	}
	return nil
}
