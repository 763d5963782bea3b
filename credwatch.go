package gridlink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/status"
)

// An agent's credentials over their lifetimes (credWatch): its proxy or
// certificate file is reread every 10 s (by content, as the revocation
// list's is, pki.Trust.Watch); a new chain for the same key is validated
// and presented by every handshake from then on (pki.Credentials.Renew),
// while connections and links already up carry on, the hub attachment
// among them (the hub checked the chain when the node attached and cuts
// no attachment when it expires; a re-attachment presents the new one).
// `gridlink proxy init` keeps the key of the proxy it replaces, so the
// node keeps its identity; a chain for another key is not taken, and the
// log says to restart the agent.
//
// The log warns ahead of each credential's end: when its Window begins (a
// tenth of its lifetime, at most an hour for a proxy, a day for a
// certificate or a list) and at the marks inside the window (a proxy: 10
// min and 1 min before; a certificate or a list: 1 h before), and says
// once when it expired and what to do. So a 12 h proxy warns 1 h, 10 min
// and 1 min before it ends, a two-minute proxy 12 s before.
var credCheckInterval = 10 * time.Second // a test's own: shorter

var (
	proxyMarks = []time.Duration{10 * time.Minute, time.Minute}
	otherMarks = []time.Duration{time.Hour}
)

// credWatch watches a node's own credential and its revocation lists.
type credWatch struct {
	files Credentials
	creds *pki.Credentials
	log   *slog.Logger  // warnings at level Warn, the rest at Info
	every time.Duration // rereads the file

	mu         sync.Mutex
	sum        [sha256.Size]byte // of the file last taken or refused
	err        string            // why the file's newest version was not taken
	unreadable bool              // the file could not be read at the last look
	warned     map[string]time.Time
}

func newCredWatch(files Credentials, creds *pki.Credentials, log *slog.Logger) *credWatch {
	w := &credWatch{files: files, creds: creds, log: log, every: credCheckInterval, warned: map[string]time.Time{}}
	if log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if data, err := os.ReadFile(w.file()); err == nil {
		w.sum = sha256.Sum256(data)
	}
	return w
}

// file is the proxy or certificate file; "" in an open grid.
func (w *credWatch) file() string {
	if w.files.Proxy != "" {
		return w.files.Proxy
	}
	return w.files.Cert
}

// run rereads the file and logs warnings until ctx ends.
func (w *credWatch) run(ctx context.Context) {
	for {
		w.reread()
		wait := w.every
		now := time.Now()
		for _, c := range w.status() {
			w.warn(c, now)
			if next := nextMark(c, now); next > 0 && next < wait {
				wait = next
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reread takes the file's newest version if it changed: a chain for the
// node's key that its trust validates.
func (w *credWatch) reread() {
	file := w.file()
	if file == "" {
		return
	}
	read := os.ReadFile
	if w.files.Proxy != "" {
		read = keyfile.Read // refused when others can read it, as at start
	}
	data, err := read(file)
	if err != nil {
		w.refuse(nil, file, err)
		return
	}
	sum := sha256.Sum256(data)
	w.mu.Lock()
	same := bytes.Equal(sum[:], w.sum[:])
	w.unreadable = false
	w.mu.Unlock()
	if same {
		return
	}
	chain, err := parseChain(w.files, data)
	if err == nil {
		err = w.creds.Renew(chain)
	}
	if err != nil {
		w.refuse(&sum, file, err)
		return
	}
	w.mu.Lock()
	w.sum, w.err = sum, ""
	w.mu.Unlock()
	_, end := pki.Lifetime(chain)
	w.log.Info(fmt.Sprintf("the %s %s was renewed: valid until %s, presented to peers from now on", w.kind(), file, end.UTC().Format(time.RFC3339)))
}

// refuse keeps the credential in use and says once why the file's
// version was not taken.
func (w *credWatch) refuse(sum *[sha256.Size]byte, file string, err error) {
	w.mu.Lock()
	news := sum != nil || !w.unreadable // a new version, or newly unreadable
	w.err, w.unreadable = err.Error(), sum == nil
	if sum != nil {
		w.sum = *sum
	}
	w.mu.Unlock()
	if news {
		w.log.Warn(fmt.Sprintf("the %s %s was not reloaded (the one in use stays): %v", w.kind(), file, err))
	}
}

func (w *credWatch) kind() string {
	if w.files.Proxy != "" {
		return status.CredProxy
	}
	return status.CredCertificate
}

// parseChain reads a proxy or certificate file's chain.
func parseChain(files Credentials, data []byte) ([]*x509.Certificate, error) {
	if files.Proxy != "" {
		pc, err := proxy.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", files.Proxy, err)
		}
		return pc.Chain, nil
	}
	certs, err := ca.ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.Cert, err)
	}
	return certs, nil
}

// status is the credentials with their states now.
func (w *credWatch) status() []status.Credential {
	now := time.Now()
	var out []status.Credential
	if file := w.file(); file != "" {
		chain := w.creds.Chain()
		c := status.Credential{Kind: w.kind(), File: file}
		if len(chain) > 0 {
			c.Subject = chain[0].Subject.String()
		}
		c.NotBefore, c.NotAfter = pki.Lifetime(chain)
		if c.Issued = c.NotBefore.Add(ca.Backdate); c.Issued.After(c.NotAfter) {
			c.Issued = time.Time{}
		}
		w.mu.Lock()
		c.Error = w.err
		w.mu.Unlock()
		out = append(out, c)
	}
	if t := w.creds.Trust(); t != nil {
		for _, crl := range t.CRLs() {
			out = append(out, status.Credential{Kind: status.CredCRL, File: w.files.CRL, Subject: crl.Issuer.String(), NotBefore: crl.ThisUpdate, NotAfter: crl.NextUpdate})
		}
	}
	for i := range out {
		out[i].State = out[i].StateAt(now)
	}
	return out
}

// marks are the times before c's end at which the log warns.
func marks(c status.Credential) []time.Duration {
	win := c.Window()
	out := []time.Duration{win}
	more := otherMarks
	if c.Kind == status.CredProxy {
		more = proxyMarks
	}
	for _, m := range more {
		if m < win {
			out = append(out, m)
		}
	}
	return append(out, 0) // expired
}

// nextMark is how long until c's next mark after now; 0: none left.
func nextMark(c status.Credential, now time.Time) time.Duration {
	for _, m := range marks(c) {
		if d := c.NotAfter.Add(-m).Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// warn logs c's latest mark passed by now, once per credential and end:
// the expiry in the words status gives, a warning before it.
func (w *credWatch) warn(c status.Credential, now time.Time) {
	var passed time.Time
	for _, m := range marks(c) {
		if at := c.NotAfter.Add(-m); !now.Before(at) {
			passed = at
		}
	}
	key := c.Kind + "\x00" + c.Subject + "\x00" + c.NotAfter.String()
	w.mu.Lock()
	seen := !passed.After(w.warned[key])
	if !passed.IsZero() {
		w.warned[key] = passed
	}
	w.mu.Unlock()
	if passed.IsZero() || seen {
		return
	}
	w.log.Warn(c.Words(now))
}
