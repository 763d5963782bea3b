package status

import (
	"fmt"
	"time"
)

// Credential is one of the credentials a node runs with, as its agent's
// status and doctor report it: its proxy or certificate (the chain it
// presents now: NotAfter is the chain's earliest end), or a revocation
// list it judges peers by (NotBefore its this-update, NotAfter its
// next-update, after which the node refuses every peer of that CA).
type Credential struct {
	Kind      string    `json:"kind"`           // CredProxy, CredCertificate or CredCRL
	File      string    `json:"file,omitempty"` // where it is read from (reread when it changes)
	Subject   string    `json:"subject"`        // a list's: its issuer
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
	// Issued is when it was made: NotBefore less the backdating issuers
	// give certificates for clocks behind (zero: NotBefore). Its lifetime
	// runs from here to NotAfter.
	Issued time.Time `json:"issued,omitzero"`
	// State is CredValid, CredExpiring (within Window of NotAfter) or
	// CredExpired, as of when the status was made.
	State string `json:"state"`
	// Error is why the file's newest version was not taken (the
	// credential in use stays the one before).
	Error string `json:"error,omitempty"`
}

// The kinds and states of a Credential.
const (
	CredProxy       = "proxy"
	CredCertificate = "certificate"
	CredCRL         = "revocation list"

	CredValid    = "valid"
	CredExpiring = "expiring"
	CredExpired  = "expired"
)

// Window is how long before its end a credential is CredExpiring: a tenth
// of its lifetime, at most an hour for a proxy (renewed daily with
// `gridlink proxy init`), a day for a certificate or a revocation list.
func (c Credential) Window() time.Duration {
	most := 24 * time.Hour
	if c.Kind == CredProxy {
		most = time.Hour
	}
	from := c.Issued
	if from.IsZero() {
		from = c.NotBefore
	}
	return min(most, c.NotAfter.Sub(from)/10)
}

// StateAt is the credential's state at now.
func (c Credential) StateAt(now time.Time) string {
	switch left := c.NotAfter.Sub(now); {
	case left <= 0:
		return CredExpired
	case left <= c.Window():
		return CredExpiring
	}
	return CredValid
}

// Remedy says what renews the credential.
func (c Credential) Remedy() string {
	switch c.Kind {
	case CredProxy:
		return "renew it with `gridlink proxy init`"
	case CredCertificate:
		return "have the grid CA issue a new one (`gridlink cert issue`)"
	}
	if c.File == "" {
		return "give the node the CA's newer list (--crl; `gridlink ca revoke` writes one)"
	}
	return "put the CA's newer list in " + c.File + " (`gridlink ca revoke` writes one)"
}

// Consequence is what the node suffers once the credential expired.
func (c Credential) Consequence() string {
	if c.Kind == CredCRL {
		return "this node refuses every peer of that CA"
	}
	return "peers refuse this node"
}

// Name is the credential in words: its kind, subject and file.
func (c Credential) Name() string {
	s := c.Kind + " " + c.Subject
	if c.File != "" {
		s += " (" + c.File + ")"
	}
	return s
}

// Words says in one line how long the credential lasts, as of now.
func (c Credential) Words(now time.Time) string {
	at := c.NotAfter.UTC().Format(time.RFC3339)
	until := "valid until"
	if c.Kind == CredCRL {
		until = "next update due"
	}
	var s string
	switch c.StateAt(now) {
	case CredExpired:
		s = fmt.Sprintf("the %s expired at %s: %s; until then %s", c.Name(), at, c.Remedy(), c.Consequence())
	case CredExpiring:
		s = fmt.Sprintf("the %s expires in %v (%s %s): %s", c.Name(), left(c.NotAfter.Sub(now)), until, at, c.Remedy())
	default:
		s = fmt.Sprintf("the %s is %s, %s %s (in %v)", c.Name(), CredValid, until, at, left(c.NotAfter.Sub(now)))
	}
	if c.Error != "" {
		s += "; its file's newest version was not taken: " + c.Error
	}
	return s
}

// left is a time left, to the second, or the tenth of one under 10 s.
func left(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
