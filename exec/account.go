package exec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
)

// account is a local account commands run as.
type account struct {
	name        string
	uid, gid    uint32
	groups      []uint32 // supplementary groups
	home, shell string
	// nologin is the login shell the passwd database lists when it
	// refuses logins and the node runs commands with /bin/sh instead
	// (Config.AllowNologin)
	nologin string
}

// lookupFunc finds a local account by name: an *AccountError when there
// is none or it cannot be known (Config.lookup: tests give their own).
type lookupFunc func(name string) (*account, error)

// AccountError is an account the service cannot run commands as: not
// found by the name service, or the name service could not be asked.
type AccountError struct {
	Name    string
	Missing bool  // the name service has no such account
	Err     error // why it could not be looked up, when not Missing
}

func (e *AccountError) Error() string {
	if e.Missing {
		return "no such local account"
	}
	return fmt.Sprintf("it cannot be looked up: %v", e.Err)
}

func (e *AccountError) Unwrap() error { return e.Err }

// Is makes a missing account a refusal (direct.ErrRefused): asked again,
// the name service gives the same answer. A name service that could not
// be asked is no refusal; it may answer next time.
func (e *AccountError) Is(target error) bool { return target == direct.ErrRefused && e.Missing }

// nameService is where accounts are read: getent asks the system's name
// service (NSS: files, LDAP, sssd, ...) whatever this binary was built
// with (os/user without cgo reads /etc/passwd only, and it does not say
// the shell); without getent (not a glibc or musl system), the passwd
// file alone.
type nameService struct {
	getent []string // getent's paths, the first that exists is run
	passwd string   // the passwd file, read without getent
}

// systemNames is the system's name service.
var systemNames = nameService{getent: []string{"/usr/bin/getent", "/bin/getent"}, passwd: "/etc/passwd"}

// getentWait bounds a name service lookup (a directory that hangs).
const getentWait = 10 * time.Second

// lookupAccount finds a local account through the name service: its ids,
// home and login shell (passwd(5)'s fields, strictly), and its groups
// (os/user: the name service with cgo, /etc/group without). An account
// the name service does not know is refused, never run with a shell
// guessed for it.
func lookupAccount(name string) (*account, error) { return systemNames.lookup(name) }

func (ns nameService) lookup(name string) (*account, error) {
	line, err := ns.passwdLine(name)
	if err != nil {
		return nil, err
	}
	a, err := parsePasswd(line, name)
	if err != nil {
		return nil, &AccountError{Name: name, Err: err}
	}
	u := &user.User{Username: name, Uid: strconv.FormatUint(uint64(a.uid), 10), Gid: strconv.FormatUint(uint64(a.gid), 10)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, &AccountError{Name: name, Err: fmt.Errorf("its groups: %w", err)}
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, &AccountError{Name: name, Err: fmt.Errorf("group id %q: not a number", g)}
		}
		a.groups = append(a.groups, uint32(n))
	}
	return a, nil
}

// passwdLine is name's line of the passwd database: getent's answer, or
// /etc/passwd's line without getent.
func (ns nameService) passwdLine(name string) (string, error) {
	getent := ""
	for _, p := range ns.getent {
		if _, err := os.Stat(p); err == nil {
			getent = p
			break
		}
	}
	if getent == "" {
		return ns.passwdFileLine(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), getentWait)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := osexec.CommandContext(ctx, getent, "passwd", "--", name)
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, []string{}
	err := cmd.Run()
	var ee *osexec.ExitError
	switch {
	case err == nil:
		return strings.TrimSuffix(out.String(), "\n"), nil
	case errors.As(err, &ee) && ee.ExitCode() == 2: // getent: no such key
		return "", &AccountError{Name: name, Missing: true}
	}
	return "", &AccountError{Name: name, Err: fmt.Errorf("%s passwd %s: %v %s", getent, name, err, strings.TrimSpace(errb.String()))}
}

// passwdFileLine is name's line of the passwd file.
func (ns nameService) passwdFileLine(name string) (string, error) {
	f, err := os.Open(ns.passwd)
	if err != nil {
		return "", &AccountError{Name: name, Err: err}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, _, _ := strings.Cut(sc.Text(), ":"); n == name {
			return sc.Text(), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", &AccountError{Name: name, Err: err}
	}
	return "", &AccountError{Name: name, Missing: true}
}

// parsePasswd reads one passwd(5) line of account name, strictly: one
// line of seven fields, the name as asked (getent also answers a uid),
// numeric ids (not -1), an absolute home and shell (an empty shell is
// /bin/sh, as login takes it).
func parsePasswd(line, name string) (*account, error) {
	if strings.ContainsAny(line, "\n\r\x00") {
		return nil, fmt.Errorf("the name service answered more than one line for %q", name)
	}
	f := strings.Split(line, ":")
	if len(f) != 7 {
		return nil, fmt.Errorf("the name service's entry for %q has %d fields, want 7", name, len(f))
	}
	if f[0] != name {
		return nil, fmt.Errorf("the name service answered account %q for %q", f[0], name)
	}
	uid, err1 := strconv.ParseUint(f[2], 10, 32)
	gid, err2 := strconv.ParseUint(f[3], 10, 32)
	if err1 != nil || err2 != nil || uid == 1<<32-1 || gid == 1<<32-1 {
		return nil, fmt.Errorf("uid %q gid %q of %q: not account ids", f[2], f[3], name)
	}
	home, shell := f[5], f[6]
	if shell == "" {
		shell = "/bin/sh"
	}
	if !filepath.IsAbs(home) || !filepath.IsAbs(shell) {
		return nil, fmt.Errorf("home %q or shell %q of %q: not absolute paths", home, shell, name)
	}
	return &account{name: name, uid: uint32(uid), gid: uint32(gid), home: home, shell: shell}, nil
}

// noLogin says whether shell is one that refuses logins (nologin,
// false): the account is not for commands.
func noLogin(shell string) bool {
	b := filepath.Base(shell)
	return b == "nologin" || b == "false"
}

// nologinShell is the shell of such an account on a node that allows
// them (Config.AllowNologin).
const nologinShell = "/bin/sh"

// environment is the command's environment: a minimal login one, then
// the request's settings (those the service passes: Service.handle
// sifts them first; a later setting of a name wins).
func environment(a *account, req *Request) []string {
	path := "/usr/local/bin:/usr/bin:/bin"
	if a.uid == 0 {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	out := []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name, "SHELL=" + a.shell, "PATH=" + path}
	if req.Pty {
		term := req.Term
		if term == "" {
			term = "dumb"
		}
		out = append(out, "TERM="+term)
	}
	seen := map[string]int{}
	for i, e := range out {
		n, _, _ := strings.Cut(e, "=")
		seen[n] = i
	}
	for _, e := range req.Env {
		n, _, _ := strings.Cut(e, "=")
		if i, ok := seen[n]; ok {
			out[i] = e
			continue
		}
		seen[n] = len(out)
		out = append(out, e)
	}
	return out
}
