package exec

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

const aliceMap = `"/O=testgrid/OU=user/CN=alice" root` + "\n"

// The service name proxies restrict to is this package's port.
func TestPortName(t *testing.T) {
	if p, err := vconn.ParseService("exec"); err != nil || p != Port {
		t.Fatalf(`vconn.ParseService("exec") = %d, %v; want %d`, p, err, Port)
	}
}

// A mapped user runs a command through her agent: stdout and stderr
// apart, the exit code returned, the run logged with subject, account and
// command.
func TestExecRuns(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	out, errs, st, err := output(t, alice, Request{Command: []string{"echo", "out;", "echo", "err", ">&2;", "exit", "3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out != "out\n" || errs != "err\n" || st != (Status{Code: 3}) || st.ExitCode() != 3 {
		t.Errorf("got stdout %q stderr %q status %v", out, errs, st)
	}
	want := `"/O=testgrid/OU=user/CN=alice" (alice (user proxy, `
	if !gr.log.has(want) || !gr.log.has(`runs as root (uid 0): "echo out; echo err >&2; exit 3"`) || !gr.log.has("ended: exit 3") {
		t.Errorf("the target's log does not name the run:\n%s", gr.log)
	}
	// a command killed by a signal: 128+N, as ssh reports it
	if _, _, st, err := output(t, alice, Request{Command: []string{"kill -KILL $$"}}, nil); err != nil || st.Signal != 9 || st.ExitCode() != 137 {
		t.Errorf("a command killed by SIGKILL: %v %v, want signal 9 (137)", st, err)
	}
}

// stdin arrives byte-exact, however large, and its end reaches the
// command (cat ends); output comes back byte-exact.
func TestExecStdinExact(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	in := make([]byte, 24<<20+12345)
	_, _ = rand.Read(in)
	out, _, st, err := output(t, alice, Request{Command: []string{"cat"}}, in)
	if err != nil || st.Code != 0 {
		t.Fatalf("cat: %v %v", st, err)
	}
	if !bytes.Equal([]byte(out), in) {
		t.Fatalf("cat returned %d bytes, not the %d sent", len(out), len(in))
	}
	// stdin from a pipe (as gridlink exec's usually is: on a link of its
	// own, the pipe it is copied into handed to the agent) and output
	// and error output both in bulk, through the buffers the data path
	// reuses: byte-exact, stdout and stderr kept apart
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for off := 0; off < len(in); off += 100 << 10 { // writes that straddle frames
			if _, err := pw.Write(in[off:min(off+100<<10, len(in))]); err != nil {
				break
			}
		}
		pw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var outb, errb bytes.Buffer
	linked, handed := linkedStdins.Load(), handedStreams.Load()
	st, err = execAt(ctx, alice, Request{Command: []string{"tee /dev/stderr"}}, IO{Stdin: pr, Stdout: &outb, Stderr: &errb})
	pr.Close()
	if err != nil || st.Code != 0 || !bytes.Equal(outb.Bytes(), in) || !bytes.Equal(errb.Bytes(), in) {
		t.Fatalf("tee from a pipe: %v %v; %d and %d bytes back, %d sent, equal %v %v", st, err, outb.Len(), errb.Len(), len(in),
			bytes.Equal(outb.Bytes(), in), bytes.Equal(errb.Bytes(), in))
	}
	if runtime.GOOS == "linux" && linkedStdins.Load() == linked {
		t.Errorf("stdin from a pipe went in frames, not on a link of its own handed to the agent")
	}
	if runtime.GOOS == "linux" && handedStreams.Load() == handed {
		t.Errorf("the frames went through the control socket: the agent took no pipes")
	}
	// stdin from a regular file (spliced, as a pipe is) and from a
	// socket (copied): byte-exact both
	file := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	fin, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fin.Close()
	for name, stdin := range map[string]io.Reader{"a regular file": fin, "a socket": socketWith(t, in)} {
		outb.Reset()
		st, err = execAt(ctx, alice, Request{Command: []string{"cat"}}, IO{Stdin: stdin, Stdout: &outb})
		if err != nil || st.Code != 0 || !bytes.Equal(outb.Bytes(), in) {
			t.Fatalf("cat from %s: %v %v; %d bytes back of %d", name, st, err, outb.Len(), len(in))
		}
	}
	// a command that reads only part of its stdin still ends, and so
	// does the client
	out, _, st, err = output(t, alice, Request{Command: []string{"head", "-c", "5"}}, in)
	if err != nil || st.Code != 0 || out != string(in[:5]) {
		t.Errorf("head -c 5: %q %v %v", out, st, err)
	}
	// no stdin: the command reads its end at once
	out, _, _, err = output(t, alice, Request{Command: []string{"wc", "-c"}}, nil)
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("wc -c without stdin: %q %v", out, err)
	}
}

// socketWith is the read end of a unix socket pair whose other end sends
// b and closes (an *os.File: what gridlink exec's stdin is when a socket).
func socketWith(t *testing.T, b []byte) *os.File {
	t.Helper()
	// close-on-exec before any fork: a command holding the write end
	// would never read its end
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	t.Cleanup(func() { r.Close() })
	go func() {
		_, _ = w.Write(b)
		w.Close()
	}()
	return r
}

// INT, TERM and HUP reach the command's process group.
func TestExecSignals(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	for _, tc := range []struct {
		sig  int
		cmd  string
		want Status
	}{
		{SIGINT, `trap "echo caught; exit 7" INT; echo ready; sleep 100`, Status{Code: 7}},
		{SIGTERM, `echo ready; exec sleep 100`, Status{Signal: 15}},
		{SIGHUP, `echo ready; sleep 100`, Status{Signal: 1}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sigs := make(chan int, 1)
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		var st Status
		go func() {
			var err error
			st, err = execAt(ctx, alice, Request{Command: []string{tc.cmd}}, IO{Stdout: pw, Signals: sigs})
			pw.Close()
			done <- err
		}()
		buf := make([]byte, 6)
		if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("%q: %q %v", tc.cmd, buf, err)
		}
		sigs <- tc.sig
		go io.Copy(io.Discard, pr)
		if err := <-done; err != nil || st != tc.want {
			t.Errorf("signal %d to %q: %v %v, want %v", tc.sig, tc.cmd, st, err, tc.want)
		}
		cancel()
	}
}

// Refusals are named alike in the caller's error and the target's log.
func TestExecRefusals(t *testing.T) {
	gr := newGrid(t, aliceMap+`"/O=testgrid/OU=user/CN=bob" bob-acct,nobody`+"\n", false)
	check := func(what string, err error, why string) {
		t.Helper()
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, why) {
			t.Errorf("%s: %v; want a refusal saying %q", what, err, why)
			return
		}
		if !gr.log.has("exec: refused ") || !gr.log.has(re.Reason) {
			t.Errorf("%s: the target's log does not say %q:\n%s", what, re.Reason, gr.log)
		}
	}
	// an unmapped member
	_, _, _, err := output(t, gr.user(t, "mallory"), Request{Command: []string{"id"}}, nil)
	check("an unmapped user", err, `subject "/O=testgrid/OU=user/CN=mallory" is not in the grid-mapfile of target`)
	// a subject mapped to other accounts asks for root
	bob := gr.user(t, "bob")
	_, _, _, err = output(t, bob, Request{Account: "root", Command: []string{"id"}}, nil)
	check("bob as root", err, `subject "/O=testgrid/OU=user/CN=bob" may not run as "root" at target: the grid-mapfile maps it to bob-acct,nobody only`)
	// mapped to an account the target does not have
	_, _, _, err = output(t, bob, Request{Command: []string{"id"}}, nil)
	check("bob as bob-acct", err, `account "bob-acct" at target: no such local account`)
	// a bad grid-mapfile refuses everyone, naming its fault
	if err := os.WriteFile(gr.mapfile, []byte(aliceMap+"junk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = output(t, gr.user(t, "alice"), Request{Command: []string{"id"}}, nil)
	check("a broken grid-mapfile", err, "the grid-mapfile of target cannot be used: "+gr.mapfile+":2: a subject without accounts")
}

// An agent that does not run as root runs commands only as its own user.
func TestExecUserAgentOnlyItsUser(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	gr.svc.euid = 65534
	_, _, _, err := output(t, gr.user(t, "alice"), Request{Command: []string{"id"}}, nil)
	var re *RefusedError
	why := `the exec service of target runs as uid 65534, not as root: it runs commands only as uid 65534, and "/O=testgrid/OU=user/CN=alice" maps to root (uid 0)`
	if !errors.As(err, &re) || re.Reason != why || !gr.log.has(why) {
		t.Errorf("alice mapped to root at a user's agent: %v; want %q on both ends", err, why)
	}
}

// MPICH's hydra runs gridlink exec with a pipe as stdin that it never
// writes or closes: the command's exit still ends the client at once, its
// output whole (stdin spliced from the pipe, the frames through the pipes
// handed to the agent).
func TestExecStdinNeverClosed(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	// a pipe as Go makes it (non-blocking, polled) and one in blocking
	// mode, as a shell gives gridlink exec its stdin
	for _, blocking := range []bool{false, true} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if blocking {
			var fds [2]int
			if err := syscall.Pipe(fds[:]); err != nil {
				t.Fatal(err)
			}
			pr.Close()
			pw.Close()
			pr, pw = os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out bytes.Buffer
		st, err := execAt(ctx, alice, Request{Command: []string{"sleep 0.2; echo proxy done; exit 7"}}, IO{Stdin: pr, Stdout: &out})
		cancel()
		pw.Close() // (ends the blocked read of stdin left behind)
		pr.Close()
		if err != nil || st.Code != 7 || out.String() != "proxy done\n" {
			t.Fatalf("a command whose stdin stays open (blocking %v): %v %v %q", blocking, st, err, out.String())
		}
	}
}
