package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/status"
)

// doctor fails on an expired credential, naming it and the remedy; an
// expiring one is a warning only.
func TestPrintCredentials(t *testing.T) {
	now := time.Now()
	c := status.Credential{Kind: status.CredProxy, File: "/p.pem", Subject: "CN=1,OU=user", NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Minute), State: status.CredExpiring}
	if err := printCredentials([]status.Credential{c}); err != nil {
		t.Errorf("an expiring proxy fails doctor: %v", err)
	}
	c.NotAfter, c.State = now.Add(-time.Minute), status.CredExpired
	err := printCredentials([]status.Credential{c})
	var ce *CredentialExpiredError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "the proxy CN=1,OU=user (/p.pem) expired at") || !strings.Contains(err.Error(), "gridlink proxy init") {
		t.Errorf("an expired proxy: %v", err)
	}
}
