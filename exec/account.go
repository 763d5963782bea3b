package exec

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// account is a local account commands run as.
type account struct {
	name        string
	uid, gid    uint32
	groups      []uint32 // supplementary groups
	home, shell string
}

// passwdFile is where login shells are read (os/user does not say them).
const passwdFile = "/etc/passwd"

// lookupAccount finds a local account: its ids and home (os/user), its
// supplementary groups, its login shell (/etc/passwd; /bin/sh when the
// account is not there, e.g. from a directory service).
func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("no such local account")
		}
		return nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("uid %q gid %q: not numbers", u.Uid, u.Gid)
	}
	a := &account{name: name, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir, shell: loginShell(name)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("its groups: %w", err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("group id %q: not a number", g)
		}
		a.groups = append(a.groups, uint32(n))
	}
	return a, nil
}

// loginShell is name's shell in /etc/passwd, or /bin/sh.
func loginShell(name string) string {
	f, err := os.Open(passwdFile)
	if err != nil {
		return "/bin/sh"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == name && fields[6] != "" {
			return fields[6]
		}
	}
	return "/bin/sh"
}

// environment is the command's environment: a minimal login one, then
// the request's settings (a later setting of a name wins).
func environment(a *account, req *Request) []string {
	path := "/usr/local/bin:/usr/bin:/bin"
	if a.uid == 0 {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env := []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name, "SHELL=" + a.shell, "PATH=" + path}
	if req.Pty {
		term := req.Term
		if term == "" {
			term = "dumb"
		}
		env = append(env, "TERM="+term)
	}
	seen := map[string]int{}
	for i, e := range env {
		n, _, _ := strings.Cut(e, "=")
		seen[n] = i
	}
	for _, e := range req.Env {
		n, _, _ := strings.Cut(e, "=")
		if i, ok := seen[n]; ok {
			env[i] = e
			continue
		}
		seen[n] = len(env)
		env = append(env, e)
	}
	return env
}
