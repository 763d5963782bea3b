package pki

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/pki/chain"
)

// Trust is what a hub or node admits: chains to the configured grid CAs
// (package chain), minus what their revocation lists revoke. Its verifier
// is swapped atomically when a new revocation list arrives, so
// connections being set up never see half of an update. Safe for
// concurrent use.
type Trust struct {
	cfg chain.Config
	v   atomic.Pointer[chain.Verifier]

	mu      sync.Mutex // guards the files being watched and changed
	files   TrustFiles
	stamp   string        // of the files last read (TrustFiles.stamp)
	changed chan struct{} // closed when a new revocation list is taken
}

// NewTrust makes a Trust from a chain configuration (Roots required).
func NewTrust(cfg chain.Config) (*Trust, error) {
	v, err := chain.New(cfg)
	if err != nil {
		return nil, err
	}
	t := &Trust{cfg: cfg, changed: make(chan struct{})}
	t.v.Store(v)
	return t, nil
}

// LoadTrust reads the CA certificates from caFile (PEM) and, if crlFile is
// not empty, the revocation list from crlFile (PEM), which Watch then
// rereads when it changes. Either may be a directory (LoadTrustFiles).
func LoadTrust(caFile, crlFile string) (*Trust, error) {
	return LoadTrustWith(caFile, crlFile, chain.Config{})
}

// LoadTrustWith is LoadTrust with the rest of the chain configuration
// (e.g. MaxProxyLifetime) taken from base; its Roots and CRLs are the
// files'. A caFile that is a directory is a trust directory
// (TrustFiles.Dir).
func LoadTrustWith(caFile, crlFile string, base chain.Config) (*Trust, error) {
	f := TrustFiles{CA: caFile, CRL: crlFile}
	if fi, err := os.Stat(caFile); err == nil && fi.IsDir() {
		f.CA, f.Dir = "", caFile
	}
	return LoadTrustFiles(f, base)
}

// Verify validates a chain as TLS delivers it (leaf first), now.
func (t *Trust) Verify(raw [][]byte) (*chain.Result, error) {
	return t.v.Load().Verify(raw, time.Time{})
}

// VerifyCertificates validates a parsed chain (leaf first), now: what
// Verify does without parsing again what TLS already parsed.
func (t *Trust) VerifyCertificates(certs []*x509.Certificate) (*chain.Result, error) {
	return t.v.Load().VerifyCertificates(certs, time.Time{})
}

// SetCRL takes a new revocation list (signed by one of the CAs) for
// connections set up from now on. A list older than the one in force
// (lower CRL number) is refused.
func (t *Trust) SetCRL(crl *x509.RevocationList) error { return t.setCRL(crl, false) }

// setCRL is SetCRL; newer refuses a list whose number is not higher than
// the one in force (what a peer offers must be news).
func (t *Trust) setCRL(crl *x509.RevocationList, newer bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cfg := t.cfg
	for _, old := range cfg.CRLs {
		if !bytes.Equal(old.RawIssuer, crl.RawIssuer) || old.Number == nil || crl.Number == nil {
			continue
		}
		if c := crl.Number.Cmp(old.Number); c < 0 || newer && c == 0 {
			return fmt.Errorf("pki: revocation list number %v is not newer than the one in force (%v)", crl.Number, old.Number)
		}
	}
	var crls []*x509.RevocationList
	for _, old := range cfg.CRLs {
		if !bytes.Equal(old.RawIssuer, crl.RawIssuer) {
			crls = append(crls, old)
		}
	}
	cfg.CRLs = append(crls, crl)
	v, err := chain.New(cfg)
	if err != nil {
		return err
	}
	t.cfg = cfg
	t.v.Store(v)
	close(t.changed)
	t.changed = make(chan struct{})
	return nil
}

// CRLs returns the revocation lists in force, one per CA that has one.
func (t *Trust) CRLs() []*x509.RevocationList {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.cfg.CRLs)
}

// Offer is a revocation list another hub holds (DER, as its CA signed
// it). It first rereads the list file (Reload), in case the newer list is
// already on disk, then takes the offered list if one of the CAs signed
// it and its CRL number is higher than that of the list in force from
// that CA; an unsigned, unparsable or older list is never taken. It
// returns Newer if it took the list, Same if the list in force has the
// same number, Older if the list in force is newer (the sender is
// behind: send it ours).
func (t *Trust) Offer(der []byte) (CRLOrder, error) {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return 0, fmt.Errorf("pki: offered revocation list: %w", err)
	}
	if crl.Number == nil {
		return 0, errors.New("pki: offered revocation list has no CRL number")
	}
	order := func() CRLOrder {
		for _, held := range t.CRLs() {
			if bytes.Equal(held.RawIssuer, crl.RawIssuer) && held.Number != nil {
				return CRLOrder(crl.Number.Cmp(held.Number))
			}
		}
		return Newer
	}
	if o := order(); o != Newer {
		return o, nil
	}
	_, _ = t.Reload() // our own file unreadable: a signed newer list is still taken
	if o := order(); o != Newer {
		return o, nil
	}
	// SetCRL checks that one of the CAs signed it (chain.New).
	if err := t.setCRL(crl, true); err != nil {
		return 0, err
	}
	return Newer, nil
}

// CRLOrder compares an offered revocation list with the one in force.
type CRLOrder int

// The orders of an offered revocation list (Trust.Offer).
const (
	Older CRLOrder = -1 // the list in force is newer
	Same  CRLOrder = 0
	Newer CRLOrder = 1 // the offered list was newer, and taken
)

func (o CRLOrder) String() string {
	switch o {
	case Older:
		return "older"
	case Same:
		return "the same"
	case Newer:
		return "newer"
	}
	return fmt.Sprintf("CRLOrder(%d)", int(o))
}

// Changed returns a channel closed when the next revocation list is taken:
// the moment to Recheck the peers of connections already up.
func (t *Trust) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// OnChange calls f each time a new revocation list is taken, until done
// is closed: where connections already up are rechecked (Recheck).
func (t *Trust) OnChange(done <-chan struct{}, f func()) {
	ch := t.Changed()
	for {
		select {
		case <-done:
			return
		case <-ch:
		}
		ch = t.Changed()
		f()
	}
}

// Recheck says whether a peer admitted earlier would still be: its chain
// checked again against the revocation lists in force, as of when it was
// admitted (a certificate that expired since does not count: connections
// outlive their certificates, as TLS sessions do). Nil for a peer of an
// open grid.
func (t *Trust) Recheck(p Peer) error {
	if p.Chain == nil || len(p.certs) == 0 {
		return nil
	}
	_, err := t.v.Load().VerifyCertificates(p.certs, p.at)
	return err
}

// Watch calls Reload every interval (zero: 10 s) until ctx ends (mtime
// polling: a trust directory's files are listed and stated, read again
// only when one changed, came or went), telling
// logf (if not nil) what it took or why it could not.
func (t *Trust) Watch(ctx context.Context, interval time.Duration, logf func(string, ...any)) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		took, err := t.Reload()
		if logf == nil {
			continue
		}
		switch {
		case took:
			logf("CAs and revocation lists reloaded from %s", t.files)
			if err != nil {
				logf("some of them left out: %v", err)
			}
		case err != nil:
			logf("revocation list not reloaded: %v", err)
		}
	}
}

// Members returns an access rule (for a listener's Allow) admitting peers
// whose certificate names one of names (the CN: a user's login, a node's
// or hub's name) or who belong to one of groups. In an open grid, where
// peers have no certificates to show, it admits no one.
func Members(names, groups []string) func(Peer) error {
	return func(p Peer) error {
		if p.Chain == nil {
			return fmt.Errorf("%s has no certificate from a grid CA", p)
		}
		if slices.Contains(names, p.Chain.Name) {
			return nil
		}
		for _, g := range p.Chain.Groups {
			if slices.Contains(groups, g) {
				return nil
			}
		}
		return fmt.Errorf("%s is neither one of %v nor in a group of %v", p.Chain.Subject(), names, groups)
	}
}
