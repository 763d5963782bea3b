package exec

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
)

// DefaultMapfile is where the grid-mapfile is unless configured.
const DefaultMapfile = "/etc/grid-security/grid-mapfile"

// The grid-mapfile, in Globus' format: one subject a line, quoted, then
// the local accounts it maps to, comma-separated; the first is the
// default, the others a caller may ask for (gridlink exec -l ACCOUNT):
//
//	# comment lines start with '#'; blank lines are skipped
//	"/O=mygrid/OU=user/CN=alice" alice
//	"/O=mygrid/OU=user/CN=bob"   bob,physics-shared
//
// Inside the quotes, \" is a quote and \\ a backslash; a subject without
// spaces may go unquoted. A gridlink certificate's subject is written as
// Globus writes DNs: its attributes in the order the certificate holds
// them (O, OU, CN for the grid CA's certificates), each "/TYPE=VALUE"
// (SubjectDN). A proxy maps as its user: the user certificate's subject.
// The RFC 4514 form gridlink prints elsewhere (CN=alice,OU=user,O=mygrid)
// is accepted too. Accounts are login names (letters, digits, '_', '.',
// '-'; at most 32). Anything else, and a subject listed twice, is an
// error naming the line.

// MapfileError is a fault in a grid-mapfile, at a line.
type MapfileError struct {
	Path string
	Line int
	Msg  string
}

func (e *MapfileError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg) }

// Mapfile is a parsed grid-mapfile.
type Mapfile struct {
	accounts map[string][]string // subject DN → accounts
}

// ParseMapfile parses a grid-mapfile; name is the path errors give.
func ParseMapfile(r io.Reader, name string) (*Mapfile, error) {
	m := &Mapfile{accounts: map[string][]string{}}
	first := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		dn, accts, err := parseMapLine(sc.Text())
		if err != nil {
			return nil, &MapfileError{Path: name, Line: n, Msg: err.Error()}
		}
		if dn == "" {
			continue
		}
		if l, ok := first[dn]; ok {
			return nil, &MapfileError{Path: name, Line: n, Msg: fmt.Sprintf("subject %q is also on line %d", dn, l)}
		}
		first[dn] = n
		m.accounts[dn] = accts
	}
	if err := sc.Err(); err != nil {
		return nil, &MapfileError{Path: name, Line: n + 1, Msg: err.Error()}
	}
	return m, nil
}

// parseMapLine parses one line: its subject and accounts, or "" for a
// blank or comment line.
func parseMapLine(line string) (string, []string, error) {
	s := strings.TrimLeft(line, " \t")
	if s == "" || s[0] == '#' {
		return "", nil, nil
	}
	if strings.ContainsAny(s, "\x00\r") {
		return "", nil, fmt.Errorf("control characters in the line")
	}
	var dn string
	if s[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
					return "", nil, fmt.Errorf(`a backslash in the subject escapes only " and \`)
				}
				i++
			}
			b.WriteByte(s[i])
		}
		if i == len(s) {
			return "", nil, fmt.Errorf("the subject's quote is not closed")
		}
		dn, s = b.String(), s[i+1:]
		if s != "" && s[0] != ' ' && s[0] != '\t' {
			return "", nil, fmt.Errorf("want spaces between the subject and its accounts")
		}
	} else {
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			return "", nil, fmt.Errorf("a subject without accounts")
		}
		dn, s = s[:end], s[end:]
	}
	if err := checkDN(dn); err != nil {
		return "", nil, err
	}
	s = strings.TrimLeft(s, " \t")
	list, rest := s, ""
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		list, rest = s[:i], strings.TrimLeft(s[i:], " \t")
	}
	if rest != "" && rest[0] != '#' {
		return "", nil, fmt.Errorf("unexpected %q after the accounts (a comment starts with '#')", rest)
	}
	if list == "" {
		return "", nil, fmt.Errorf("subject %q maps to no account", dn)
	}
	accts := strings.Split(list, ",")
	for _, a := range accts {
		if !accountRE.MatchString(a) {
			return "", nil, fmt.Errorf("account %q: want a login name (letters, digits, '_', '.', '-'; at most 32)", a)
		}
	}
	return dn, accts, nil
}

// checkDN checks a subject's form: /TYPE=VALUE... or TYPE=VALUE,...
func checkDN(dn string) error {
	if dn == "" {
		return fmt.Errorf("an empty subject")
	}
	if !strings.HasPrefix(dn, "/") {
		if !strings.Contains(dn, "=") {
			return fmt.Errorf("subject %q: want /TYPE=VALUE/... (Globus) or TYPE=VALUE,... (RFC 4514)", dn)
		}
		return nil
	}
	for _, part := range strings.Split(dn[1:], "/") {
		if k, _, ok := strings.Cut(part, "="); !ok || k == "" {
			return fmt.Errorf("subject %q: %q is not TYPE=VALUE", dn, part)
		}
	}
	return nil
}

// Accounts are the accounts cert's subject maps to (first the default),
// by its Globus form or its RFC 4514 form; nil if none.
func (m *Mapfile) Accounts(cert *x509.Certificate) []string {
	if a := m.accounts[SubjectDN(cert)]; a != nil {
		return a
	}
	return m.accounts[cert.Subject.String()]
}

// attrNames are the short names of subject attributes, as OpenSSL (and
// Globus) print them.
// SubjectDN is cert's subject as Globus writes it in grid-mapfiles: each
// attribute "/TYPE=VALUE" in the order the certificate holds them
// (/O=mygrid/OU=user/CN=alice); see ca.SubjectDN.
func SubjectDN(cert *x509.Certificate) string { return ca.SubjectDN(cert) }

// mapSource is the grid-mapfile a service reads: reread when its size or
// modification time changes, so an edit applies to the next command.
type mapSource struct {
	path string

	mu    sync.Mutex
	m     *Mapfile
	err   error
	mtime time.Time
	size  int64
}

// load is the grid-mapfile as it is now, or why it cannot be used.
func (s *mapSource) load() (*Mapfile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, fmt.Errorf("grid-mapfile: %w", err)
	}
	if s.m != nil || s.err != nil {
		if fi.ModTime().Equal(s.mtime) && fi.Size() == s.size {
			return s.m, s.err
		}
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("grid-mapfile: %w", err)
	}
	defer f.Close()
	s.m, s.err = ParseMapfile(f, s.path)
	s.mtime, s.size = fi.ModTime(), fi.Size()
	return s.m, s.err
}
