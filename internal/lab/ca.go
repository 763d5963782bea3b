package lab

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/proxy"
)

// The lab's grid CA. The overlays gridlab starts (package matrix) run with
// admission on: every hub and node gets a certificate for its identity key
// from a CA made for the lab, so demos and tests need nothing set up by
// hand. The CA lives in CADir with the layout of `gridlink ca init
// --no-passphrase` (its key unprotected: it is a lab's), so that
//
//	gridlink cert issue --dir /run/gridlab/ca --role node --name NAME --key NAME.key --out NAME.pem
//
// issues more by hand; `gridlab down` removes it with the rest of the lab.
const (
	// CAName is the lab grid's name: its CA is CN=gridlab CA, O=gridlab.
	CAName = "gridlab"
)

// CADir holds the lab's CA, and the keys and certificates it issued (in
// issued/).
func CADir() string { return filepath.Join(StateDir, "ca") }

// CA is the lab's grid CA.
type CA struct {
	Authority *ca.Authority
	dir       string
}

// Issued is what the lab CA gave a hub, a node or a user: the files its
// command line names.
type Issued struct {
	CA, CRL   string // the lab CA's certificate and revocation list
	Key, Cert string // the identity key and its certificate (hubs, nodes)
	Proxy     string // a user's proxy credential, instead of Key and Cert
}

// Args are the command-line flags for i: --ca, --crl, and --key and
// --cert or --proxy; none for Issued{} (an open grid's).
func (i Issued) Args() []string {
	switch {
	case i.Proxy != "":
		return []string{"--ca", i.CA, "--crl", i.CRL, "--proxy", i.Proxy}
	case i.Key != "":
		return []string{"--ca", i.CA, "--crl", i.CRL, "--key", i.Key, "--cert", i.Cert}
	}
	return nil
}

// OpenCA returns the lab's CA, making it (with an empty revocation list)
// if there is none yet.
func OpenCA() (*CA, error) {
	dir := CADir()
	if _, err := os.Stat(filepath.Join(dir, ca.DirKey)); errors.Is(err, os.ErrNotExist) {
		if err := makeCA(dir); err != nil {
			return nil, fmt.Errorf("lab CA: %w", err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, ca.DirCert))
	if err != nil {
		return nil, fmt.Errorf("lab CA: %w", err)
	}
	certs, err := ca.ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("lab CA %s: %w", dir, err)
	}
	key, err := keyfile.Load(filepath.Join(dir, ca.DirKey), nil)
	if err != nil {
		return nil, fmt.Errorf("lab CA: %w", err)
	}
	a, err := ca.Load(certs[0], key)
	if err != nil {
		return nil, fmt.Errorf("lab CA %s: %w", dir, err)
	}
	return &CA{Authority: a, dir: dir}, nil
}

// makeCA writes a new CA into a scratch directory and renames it to dir,
// so that no one sees half a CA; if another process made one meanwhile,
// that one stays.
func makeCA(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".ca-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after the rename there is nothing left to remove
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	a, err := ca.New(ca.Config{Name: CAName})
	if err != nil {
		return err
	}
	pem, err := keyfile.Marshal(a.Key())
	if err != nil {
		return err
	}
	if err := keyfile.Write(filepath.Join(tmp, ca.DirKey), pem); err != nil {
		return err
	}
	crl, err := a.UpdateCRL(nil, ca.CRLUpdate{})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ca.DirCert), ca.EncodeCertificates(a.Cert), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ca.DirCRL), ca.EncodeCRL(crl), 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(tmp, "issued"), 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ca.DirKey)); serr == nil {
			return nil // made by another process first
		}
		return err
	}
	return nil
}

// CertFile and CRLFile are the lab CA's certificate and revocation list.
func (c *CA) CertFile() string { return filepath.Join(c.dir, ca.DirCert) }
func (c *CA) CRLFile() string  { return filepath.Join(c.dir, ca.DirCRL) }

// CRL reads the revocation list in force.
func (c *CA) CRL() (*x509.RevocationList, error) {
	data, err := os.ReadFile(c.CRLFile())
	if err != nil {
		return nil, err
	}
	return ca.ParseCRL(data)
}

// SetCRL replaces the revocation list (atomically: hubs and nodes reread
// it when it changes).
func (c *CA) SetCRL(crl *x509.RevocationList) error {
	if err := crl.CheckSignatureFrom(c.Authority.Cert); err != nil {
		return fmt.Errorf("lab CA: a revocation list it did not sign: %w", err)
	}
	tmp := c.CRLFile() + ".new"
	if err := os.WriteFile(tmp, ca.EncodeCRL(crl), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.CRLFile())
}

// Issue makes a new identity key for a hub or node called name (role
// ca.Hub or ca.Node) and certifies it, each call a key of its own: two
// processes never share an identity.
func (c *CA) Issue(role ca.Role, name string) (Issued, error) {
	key, err := identity.NewKey()
	if err != nil {
		return Issued{}, err
	}
	cert, err := c.Authority.Issue(ca.Request{Role: role, Name: name, Key: key.Private().Public()})
	if err != nil {
		return Issued{}, fmt.Errorf("lab CA: %s %s: %w", role, name, err)
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "issued"), fmt.Sprintf("%s-%s-*.key", role, name))
	if err != nil {
		return Issued{}, err
	}
	f.Close()
	i := Issued{CA: c.CertFile(), CRL: c.CRLFile(), Key: f.Name()}
	i.Cert = i.Key[:len(i.Key)-len(".key")] + ".pem"
	if err := key.Save(i.Key); err != nil {
		return Issued{}, err
	}
	if err := os.WriteFile(i.Cert, ca.EncodeCertificates(cert), 0o644); err != nil {
		return Issued{}, err
	}
	return i, nil
}

// IssueProxy certifies a user called user, in groups, and makes a proxy of
// that certificate (as `gridlink proxy init` would, 12 hours): each call a
// new user key and a new proxy key, so two processes never share an
// identity. The user's key is not kept.
func (c *CA) IssueProxy(user string, groups ...string) (Issued, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	cert, err := c.Authority.Issue(ca.Request{Role: ca.User, Name: user, Groups: groups, Key: priv.Public()})
	if err != nil {
		return Issued{}, fmt.Errorf("lab CA: user %s: %w", user, err)
	}
	p, err := proxy.New(&proxy.Credential{Chain: []*x509.Certificate{cert}, Key: priv}, proxy.Options{})
	if err != nil {
		return Issued{}, fmt.Errorf("lab CA: proxy of %s: %w", user, err)
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "issued"), fmt.Sprintf("user-%s-*.proxy.pem", user))
	if err != nil {
		return Issued{}, err
	}
	f.Close()
	if err := proxy.Save(f.Name(), p); err != nil {
		return Issued{}, err
	}
	return Issued{CA: c.CertFile(), CRL: c.CRLFile(), Proxy: f.Name()}, nil
}
