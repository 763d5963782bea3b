package exec

import (
	"fmt"
	"strings"

	"github.com/gridlink/gridlink/pki"
)

// authorize decides who the command runs as: the account, or why none.
func (s *Service) authorize(peer pki.Peer, req *Request) (*account, string) {
	if peer.Chain == nil {
		return nil, fmt.Sprintf("exec needs a grid CA: %s shows no certificate (node %s runs an open grid, where no subject can be mapped to an account)", peer, s.node.Name())
	}
	if err := s.node.Recheck(peer); err != nil {
		return nil, fmt.Sprintf("%s is no longer admitted at %s: %v", peer, s.node.Name(), err)
	}
	if !peer.Allows("exec", s.node.ID()) {
		return nil, fmt.Sprintf("%s may not use exec at %s: its proxy is restricted to %v", peer, s.node.Name(), peer.Chain.Restriction)
	}
	m, err := s.maps.load()
	if err != nil {
		return nil, fmt.Sprintf("the grid-mapfile of %s cannot be used: %v", s.node.Name(), err)
	}
	dn := SubjectDN(peer.Chain.EndEntity)
	accts := m.Accounts(peer.Chain.EndEntity)
	if len(accts) == 0 {
		return nil, fmt.Sprintf("subject %q is not in the grid-mapfile of %s", dn, s.node.Name())
	}
	name := accts[0]
	if req.Account != "" {
		ok := false
		for _, a := range accts {
			ok = ok || a == req.Account
		}
		if !ok {
			return nil, fmt.Sprintf("subject %q may not run as %q at %s: the grid-mapfile maps it to %s only", dn, req.Account, s.node.Name(), strings.Join(accts, ","))
		}
		name = req.Account
	}
	acct, err := s.lookup(name)
	if err != nil {
		return nil, fmt.Sprintf("account %q at %s: %v", name, s.node.Name(), err)
	}
	if noLogin(acct.shell) {
		if !s.allowNologin {
			return nil, fmt.Sprintf("account %q at %s has the login shell %s, which refuses logins: exec runs no command as it (its operator may allow that: gridlink node --exec-allow-nologin)", name, s.node.Name(), acct.shell)
		}
		acct.nologin, acct.shell = acct.shell, nologinShell
	}
	if s.euid != 0 && int(acct.uid) != s.euid {
		return nil, fmt.Sprintf("the exec service of %s runs as uid %d, not as root: it runs commands only as uid %d, and %q maps to %s (uid %d)", s.node.Name(), s.euid, s.euid, dn, acct.name, acct.uid)
	}
	return acct, ""
}

// commandText is the command as the log shows it.
func commandText(req *Request) string {
	if len(req.Command) == 0 {
		return "(login shell)"
	}
	return req.shellLine()
}

// shellNote is what the log adds to an account's uid: the shell that
// stands for one that refuses logins (AllowNologin).
func (a *account) shellNote() string {
	if a.nologin == "" {
		return ""
	}
	return fmt.Sprintf(", shell %s for its %s: --exec-allow-nologin", a.shell, a.nologin)
}

// envText is what the log says of the environment a command was given:
// the names, never the values.
func envText(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return " with environment " + envNames(env)
}
