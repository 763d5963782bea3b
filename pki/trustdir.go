package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
)

// TrustFiles are where a Trust's CAs and revocation lists are.
//
// A trust directory is what grid hosts keep in /etc/grid-security/
// certificates (X509_CERT_DIR), as OpenSSL's c_rehash names it: a CA
// certificate (PEM) in HASH.N, its revocation list (PEM or DER) in
// HASH.rN, HASH the 8 hex digits of `openssl x509 -hash` and N a digit
// string; other files (HASH.signing_policy, HASH.namespaces, *.info)
// are not read.
type TrustFiles struct {
	// CA is the grid's own CA certificates (PEM): they certify hubs,
	// nodes and users (chain.Config.Roots).
	CA string
	// CRL is a revocation list file (PEM or DER), or a directory whose
	// HASH.rN, *.pem and *.crl files are revocation lists.
	CRL string
	// Dir is a trust directory: its CAs certify users only
	// (chain.Config.UserCAs), its HASH.rN files are their revocation
	// lists.
	Dir string
}

func (f TrustFiles) String() string {
	var s []string
	for _, p := range []string{f.CA, f.CRL, f.Dir} {
		if p != "" {
			s = append(s, p)
		}
	}
	return strings.Join(s, ", ")
}

var (
	hashedCA  = regexp.MustCompile(`^[0-9a-fA-F]{8}\.[0-9]+$`)
	hashedCRL = regexp.MustCompile(`^[0-9a-fA-F]{8}\.r[0-9]+$`)
)

// LoadTrustFiles reads the CAs and revocation lists f names (CA or Dir
// required), which Watch then rereads when they change. A trust
// directory's files that do not parse, and revocation lists no CA
// signed, are left out (Reload says which); an unreadable CA or CRL
// file is an error.
func LoadTrustFiles(f TrustFiles, base chain.Config) (*Trust, error) {
	cfg := base
	cfg.Roots, cfg.UserCAs, cfg.CRLs = nil, nil, nil
	if f.CA != "" {
		data, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("pki: CA certificates: %w", err)
		}
		if cfg.Roots, err = ca.ParseCertificates(data); err != nil {
			return nil, fmt.Errorf("pki: CA certificates %s: %w", f.CA, err)
		}
	}
	snap, err := f.read()
	if err != nil {
		return nil, err
	}
	if f.Dir != "" && len(snap.userCAs) == 0 && f.CA == "" {
		return nil, fmt.Errorf("pki: trust directory %s holds no CA certificate (HASH.0 files)", f.Dir)
	}
	cfg.UserCAs = snap.userCAs
	cfg.CRLs = newestSigned(&cfg, nil, snap)
	if snap.fileCRL != nil && !slices.Contains(cfg.CRLs, snap.fileCRL) {
		return nil, fmt.Errorf("pki: %s: revocation list (issuer %s) is not signed by a configured CA", f.CRL, snap.fileCRL.Issuer)
	}
	t, err := NewTrust(cfg)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", f, err)
	}
	t.files, t.stamp = f, snap.stamp
	return t, nil
}

// Reload rereads the trust directory and revocation lists given to
// LoadTrustFiles if a file changed, came or went. It reports whether it
// took them; an error beside true names the files it left out.
func (t *Trust) Reload() (bool, error) {
	t.mu.Lock()
	files, old := t.files, t.stamp
	t.mu.Unlock()
	if files.CRL == "" && files.Dir == "" {
		return false, nil
	}
	st, err := files.stampNow()
	if err != nil {
		return false, err
	}
	if st == old {
		return false, nil
	}
	snap, err := files.read()
	if err != nil {
		return false, err
	}
	if err := t.take(snap); err != nil {
		return false, err
	}
	return true, errors.Join(snap.skipped...)
}

// take puts what a reread found in force: the trust directory's CAs, the
// newest signed revocation list of each CA among those in force and
// those read. The --crl file's list must not be older than the one in
// force (a directory's may: a peer may have offered a newer one).
func (t *Trust) take(snap snapshot) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cfg := t.cfg
	if t.files.Dir != "" {
		cfg.UserCAs = snap.userCAs
	}
	if l := snap.fileCRL; l != nil {
		for _, old := range cfg.CRLs {
			if bytes.Equal(old.RawIssuer, l.RawIssuer) && old.Number != nil && l.Number != nil && l.Number.Cmp(old.Number) < 0 {
				return fmt.Errorf("pki: %s: revocation list number %v is not newer than the one in force (%v)", t.files.CRL, l.Number, old.Number)
			}
		}
	}
	cfg.CRLs = newestSigned(&cfg, cfg.CRLs, snap)
	v, err := chain.New(cfg)
	if err != nil {
		return err
	}
	t.cfg, t.stamp = cfg, snap.stamp
	t.v.Store(v)
	close(t.changed)
	t.changed = make(chan struct{})
	return nil
}

// newestSigned is, of the lists held and read, the newest of each CA of
// cfg that signed it; lists of no such CA are left out (a CA that left
// the trust directory takes its list along).
func newestSigned(cfg *chain.Config, held []*x509.RevocationList, snap snapshot) []*x509.RevocationList {
	cands := slices.Concat(held, snap.crls)
	if snap.fileCRL != nil {
		cands = append(cands, snap.fileCRL)
	}
	cas := slices.Concat(cfg.Roots, cfg.UserCAs)
	var out []*x509.RevocationList
	for _, l := range cands {
		signed := slices.ContainsFunc(cas, func(c *x509.Certificate) bool {
			return bytes.Equal(l.RawIssuer, c.RawSubject) && l.CheckSignatureFrom(c) == nil
		})
		if !signed {
			continue
		}
		i := slices.IndexFunc(out, func(o *x509.RevocationList) bool { return bytes.Equal(o.RawIssuer, l.RawIssuer) })
		switch {
		case i < 0:
			out = append(out, l)
		case !older(l, out[i]):
			out[i] = l
		}
	}
	return out
}

// older reports whether revocation list a is older than b of the same CA:
// a lower CRL number, else an earlier ThisUpdate.
func older(a, b *x509.RevocationList) bool {
	if a.Number != nil && b.Number != nil && a.Number.Cmp(b.Number) != 0 {
		return a.Number.Cmp(b.Number) < 0
	}
	return a.ThisUpdate.Before(b.ThisUpdate)
}

// snapshot is what one reading of the files found.
type snapshot struct {
	stamp   string
	userCAs []*x509.Certificate
	crls    []*x509.RevocationList // of directories
	fileCRL *x509.RevocationList   // of the CRL file
	skipped []error                // a directory's files left out
}

// listing is the files a reread looks at: the CRL file, and the CA and
// CRL files of the directories, with whether each is a CA certificate.
func (f TrustFiles) listing() ([]string, map[string]bool, error) {
	var files []string
	isCA := map[string]bool{}
	add := func(dir string, caFiles bool, crl func(string) bool) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("pki: trust directory: %w", err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			switch {
			case caFiles && hashedCA.MatchString(e.Name()):
				files, isCA[p] = append(files, p), true
			case crl(e.Name()):
				files = append(files, p)
			}
		}
		return nil
	}
	if f.Dir != "" {
		if err := add(f.Dir, true, hashedCRL.MatchString); err != nil {
			return nil, nil, err
		}
	}
	if fi, err := os.Stat(f.CRL); err == nil && fi.IsDir() {
		if err := add(f.CRL, false, func(n string) bool {
			return hashedCRL.MatchString(n) || strings.HasSuffix(n, ".pem") || strings.HasSuffix(n, ".crl")
		}); err != nil {
			return nil, nil, err
		}
	} else if f.CRL != "" {
		files = append(files, f.CRL)
	}
	return files, isCA, nil
}

// stampNow is the names, sizes and modification times of the files a
// reread would read: what Reload compares to see a change.
func (f TrustFiles) stampNow() (string, error) {
	files, _, err := f.listing()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range files {
		fi, err := os.Stat(p)
		if err != nil {
			if p == f.CRL {
				return "", fmt.Errorf("pki: revocation list: %w", err)
			}
			continue // gone since the listing: the next poll sees it
		}
		fmt.Fprintf(&b, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

// read reads every file of the listing.
func (f TrustFiles) read() (snapshot, error) {
	var s snapshot
	st, err := f.stampNow()
	if err != nil {
		return s, err
	}
	s.stamp = st
	files, isCA, err := f.listing()
	if err != nil {
		return s, err
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err == nil && isCA[p] {
			var certs []*x509.Certificate
			if certs, err = ca.ParseCertificates(data); err == nil {
				if err = ca.CheckIssuer(certs[0]); err == nil {
					s.userCAs = append(s.userCAs, certs...)
				}
			}
		} else if err == nil {
			var l *x509.RevocationList
			if l, err = ca.ParseCRL(data); err == nil && p == f.CRL {
				s.fileCRL = l
			} else if err == nil {
				s.crls = append(s.crls, l)
			}
		}
		switch {
		case err != nil && p == f.CRL:
			return s, fmt.Errorf("pki: revocation list %s: %w", p, err)
		case err != nil:
			s.skipped = append(s.skipped, fmt.Errorf("%s: %w", p, err))
		}
	}
	return s, nil
}
