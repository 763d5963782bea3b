package exec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// As root, the service runs a command as the mapped account: its uid,
// gid and groups, its home as the working directory, a minimal login
// environment plus what the caller passes (an MPI variable), nothing of
// the agent's own.
func TestExecAsMappedAccount(t *testing.T) {
	name, uid, home := testAccount(t)
	gr := newGrid(t, `"/O=testgrid/OU=user/CN=carol" `+name+"\n", false)
	t.Setenv("GRIDLINK_AGENT_SECRET", "leaked")
	carol := gr.user(t, "carol")
	out, errs, st, err := output(t, carol, Request{Command: []string{"id -u; id -g; id -G; pwd; env | sort"}, Env: []string{"OMPI_X=1 2"}}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("%v %v: %s", st, err, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || lines[0] != strconv.Itoa(uid) || lines[1] != lines[2] || lines[3] != home {
		t.Fatalf("ran with uid, gid, groups, dir %q; want uid %d, its own group only, home %s", lines, uid, home)
	}
	env := strings.Join(lines[4:], "\n")
	for _, want := range []string{"HOME=" + home, "USER=" + name, "LOGNAME=" + name, "SHELL=/bin/sh", "OMPI_X=1 2", "PATH=/usr/local/bin:/usr/bin:/bin"} {
		if !strings.Contains(env, want+"\n") && !strings.HasSuffix(env, want) {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "GRIDLINK_AGENT_SECRET") || strings.Contains(env, "GOPATH") {
		t.Errorf("the agent's environment leaked into the command's:\n%s", env)
	}
	// a working directory of the caller's choice, checked as the account
	private := filepath.Join(home, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, _, _, err := output(t, carol, Request{Command: []string{"pwd"}, Dir: private}, nil); err == nil || out != "" {
		// root-owned and 0700: the account may not enter it
		t.Errorf("dir %s (root's, 0700): %q %v; want refused", private, out, err)
	}
	if err := os.Chown(private, uid, -1); err != nil {
		t.Fatal(err)
	}
	if out, _, _, err := output(t, carol, Request{Command: []string{"pwd"}, Dir: private}, nil); err != nil || out != private+"\n" {
		t.Errorf("dir %s: %q %v", private, out, err)
	}
	// the account may not become root
	out, _, st, err = output(t, carol, Request{Command: []string{"cat /etc/shadow >/dev/null 2>&1; echo $?"}}, nil)
	if err != nil || strings.TrimSpace(out) == "0" {
		t.Errorf("the mapped account read /etc/shadow: %q %v %v", out, st, err)
	}
}

// A pty: the command's stdio is a terminal of the caller's size, and
// size changes reach it.
func TestExecPty(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	out, _, st, err := output(t, alice, Request{Command: []string{"tty; stty size; echo $TERM"}, Pty: true, Term: "xterm-256color", Rows: 24, Cols: 80}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("%v %v", st, err)
	}
	if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "24 80\r\n") || !strings.Contains(out, "xterm-256color") {
		t.Errorf("on a pty: %q", out)
	}
}

func TestExecPtyResize(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	win := make(chan [2]uint16, 1)
	win <- [2]uint16{30, 100}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	st, err := execAt(ctx, alice, Request{Command: []string{`while [ "$(stty size)" != "30 100" ]; do sleep 0.05; done; echo resized`}, Pty: true, Rows: 24, Cols: 80}, IO{Stdout: &out, Window: win})
	if err != nil || st.Code != 0 || !strings.Contains(out.String(), "resized") {
		t.Errorf("a window change: %q %v %v", out.String(), st, err)
	}
}

// An account whose login shell refuses logins (nobody's is nologin on
// Debian) runs nothing: refused on both ends, the command never started
// (not even the nologin program); a node that allows such accounts runs
// the command with /bin/sh, its log saying so.
func TestExecNologinRefused(t *testing.T) {
	needRoot(t)
	nobody, err := lookupAccount("nobody")
	if err != nil || !noLogin(nobody.shell) {
		t.Skipf("this host's nobody: %+v %v; want one whose shell refuses logins", nobody, err)
	}
	mark := anyoneMark(t)
	gr := newGrid(t, `"/O=testgrid/OU=user/CN=bob" nobody`+"\n", false)
	out, errs, st, err := output(t, gr.user(t, "bob"), Request{Command: []string{"touch " + mark}}, nil)
	why := `account "nobody" at target has the login shell ` + nobody.shell + `, which refuses logins: exec runs no command as it`
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, why) || !gr.log.has("exec: refused ") || !gr.log.has(re.Reason) {
		t.Errorf("bob as nobody: %v %v %q %q; want refused saying %q on both ends\n%s", st, err, out, errs, why, gr.log)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the command ran as nobody")
	}

	gr = newGridWith(t, `"/O=testgrid/OU=user/CN=bob" nobody`+"\n", false, Config{AllowNologin: true})
	out, errs, st, err = output(t, gr.user(t, "bob"), Request{Command: []string{"id -u; echo $SHELL"}}, nil)
	if err != nil || st.Code != 0 || out != "65534\n/bin/sh\n" {
		t.Errorf("bob as nobody, nologin allowed: %v %v %q %q", st, err, out, errs)
	}
	if !gr.log.has("runs as nobody (uid 65534, shell /bin/sh for its " + nobody.shell + ": --exec-allow-nologin)") {
		t.Errorf("the target's log does not name the shell put in nologin's place:\n%s", gr.log)
	}
}

// fakeNames is a name service (getent) that knows accounts /etc/passwd
// does not, as LDAP or sssd would: ldapsh (uid 65534, /bin/sh), ldapfalse
// (/bin/false), broken (a short entry), other (answers for another name);
// down fails as a name service that cannot be reached; the rest are not
// there.
func fakeNames(t *testing.T) nameService {
	dir := t.TempDir()
	getent := filepath.Join(dir, "getent")
	script := `#!/bin/sh
[ "$1 $2" = "passwd --" ] || exit 1
case "$3" in
ldapsh) echo "ldapsh:x:65534:65534:LDAP:/:/bin/sh" ;;
ldapfalse) echo "ldapfalse:x:65534:65534:LDAP:/:/bin/false" ;;
broken) echo "broken:x:1:1" ;;
other) echo "root:x:0:0:root:/root:/bin/sh" ;;
down) echo "getent: the directory does not answer" >&2; exit 1 ;;
*) exit 2 ;;
esac
`
	if err := os.WriteFile(getent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return nameService{getent: []string{filepath.Join(dir, "none"), getent}, passwd: filepath.Join(dir, "passwd-unused")}
}

// Accounts are looked up through the name service, not /etc/passwd: one
// only the directory knows runs with its ids and shell there; one whose
// shell there refuses logins is refused; one the name service does not
// know, or cannot answer for, is refused naming why, never run with
// /bin/sh for a shell.
func TestExecAccountsFromNameService(t *testing.T) {
	needRoot(t)
	ns := fakeNames(t)
	gr := newGridWith(t, `"/O=testgrid/OU=user/CN=bob" ldapsh,ldapfalse,ghost,broken,other,down`+"\n", false, Config{lookup: ns.lookup})
	bob := gr.user(t, "bob")
	out, errs, st, err := output(t, bob, Request{Account: "ldapsh", Command: []string{"id -u; echo $SHELL $HOME"}}, nil)
	if err != nil || st.Code != 0 || out != "65534\n/bin/sh /\n" {
		t.Errorf("bob as ldapsh (the directory's): %v %v %q %q", st, err, out, errs)
	}
	mark := anyoneMark(t)
	for acct, why := range map[string]string{
		"ldapfalse": `account "ldapfalse" at target has the login shell /bin/false, which refuses logins: exec runs no command as it (its operator may allow that: gridlink node --exec-allow-nologin)`,
		"ghost":     `account "ghost" at target: no such local account`,
		"broken":    `account "broken" at target: it cannot be looked up: the name service's entry for "broken" has 4 fields, want 7`,
		"other":     `account "other" at target: it cannot be looked up: the name service answered account "root" for "other"`,
		"down":      `account "down" at target: it cannot be looked up: ` + ns.getent[1] + ` passwd down: exit status 1 getent: the directory does not answer`,
	} {
		out, errs, st, err := output(t, bob, Request{Account: acct, Command: []string{"touch " + mark}}, nil)
		var re *RefusedError
		if !errors.As(err, &re) || re.Reason != why || !gr.log.has(re.Reason) {
			t.Errorf("bob as %s: %v %v %q %q; want refused saying %q on both ends", acct, st, err, out, errs, why)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Errorf("bob as %s: the command ran", acct)
			os.Remove(mark)
		}
	}
}

// Without getent, the passwd file is read, as strictly; an account not in
// it is not there.
func TestLookupWithoutGetent(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nodd:x:5\nsvc:x:7:7::/srv:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := nameService{passwd: passwd}
	if a, err := ns.lookup("svc"); err != nil || a.uid != 7 || a.home != "/srv" || a.shell != "/bin/sh" {
		t.Errorf("svc: %+v %v; want uid 7, home /srv, shell /bin/sh (empty in passwd)", a, err)
	}
	var ae *AccountError
	if _, err := ns.lookup("ghost"); !errors.As(err, &ae) || !ae.Missing {
		t.Errorf("ghost: %v; want no such account", err)
	}
	if _, err := ns.lookup("odd"); !errors.As(err, &ae) || ae.Missing {
		t.Errorf("odd: %v; want an entry that cannot be read", err)
	}
	for _, line := range []string{"a:x:1:1::/h:/bin/sh:extra", "a:x:-1:1::/h:/bin/sh", "a:x:4294967295:1::/h:/bin/sh", "a:x:1:1::h:/bin/sh", "a:x:1:1::/h:sh", "a:x:1:1::/h:/bin/sh\nb:x:2:2::/:/bin/sh"} {
		if a, err := parsePasswd(line, "a"); err == nil {
			t.Errorf("%q taken: %+v", line, a)
		}
	}
}

// anyoneMark is a path where any account could make a file (a command
// that ran leaves it): in a directory of the test's that any may write.
func anyoneMark(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "glexec-mark-")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ran")
}
