package exec

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// As root, the service runs a command as the mapped account: its uid,
// gid and groups, its home as the working directory, a minimal login
// environment plus what the caller passes, nothing of the agent's own.
func TestExecAsMappedAccount(t *testing.T) {
	name, uid, home := testAccount(t)
	gr := newGrid(t, `"/O=testgrid/OU=user/CN=carol" `+name+"\n", false)
	t.Setenv("GRIDLINK_AGENT_SECRET", "leaked")
	carol := gr.user(t, "carol")
	out, errs, st, err := output(t, carol, Request{Command: []string{"id -u; id -g; id -G; pwd; env | sort"}, Env: []string{"OMPI_X=1 2", "PATH=/opt/mpi/bin:/usr/bin:/bin"}}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("%v %v: %s", st, err, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || lines[0] != strconv.Itoa(uid) || lines[1] != lines[2] || lines[3] != home {
		t.Fatalf("ran with uid, gid, groups, dir %q; want uid %d, its own group only, home %s", lines, uid, home)
	}
	env := strings.Join(lines[4:], "\n")
	for _, want := range []string{"HOME=" + home, "USER=" + name, "LOGNAME=" + name, "SHELL=/bin/sh", "OMPI_X=1 2", "PATH=/opt/mpi/bin:/usr/bin:/bin"} {
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
