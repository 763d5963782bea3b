package exec

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// blockingPipe is a pipe in blocking mode, as a shell gives gridlink exec
// its stdin, whose write end sends b and closes.
func blockingPipe(t *testing.T, b []byte) *os.File {
	t.Helper()
	syscall.ForkLock.RLock()
	var fds [2]int
	err := syscall.Pipe(fds[:])
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

// Stdin from a pipe goes on a link of its own (the service's token in
// 'F', the pipe it is spliced into handed to the caller's agent, as nc
// hands its stdin): byte-exact, its end reaches the command, the exit
// status is the command's; a command that stops reading it ends, and so
// does the client. Against a service that predates features, the client
// asks again without and sends stdin in frames, byte-exact as well.
func TestExecStdinLink(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stdin links are Linux's")
	}
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	in := make([]byte, 9<<20+777)
	_, _ = rand.Read(in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(cmd string, stdin *os.File) (string, Status, error) {
		var out bytes.Buffer
		st, err := execAt(ctx, alice, Request{Command: []string{cmd}}, IO{Stdin: stdin, Stdout: &out})
		return out.String(), st, err
	}
	for _, old := range []bool{false, true} {
		gr.svc.asOld.Store(old)
		linked, spliced := linkedStdins.Load(), splicedFrames.Load()
		out, st, err := run("cat; exit 5", blockingPipe(t, in))
		if err != nil || st.Code != 5 || out != string(in) {
			t.Fatalf("cat from a pipe (old service %v): %v %v; %d bytes back of %d, equal %v", old, st, err, len(out), len(in), out == string(in))
		}
		if got := linkedStdins.Load() - linked; (got == 1) == old {
			t.Errorf("old service %v: %d stdin links", old, got)
		}
		if got := splicedFrames.Load() - spliced; old && got < int64(len(in)/MaxData) {
			t.Errorf("an old service: %d stdin frames spliced, want %d or more", got, len(in)/MaxData)
		}
		const why = `bad request: exec protocol: frame 'Q': json: unknown field "features"`
		if gr.log.has(why) != old {
			t.Errorf("old service %v: its log says %q: %v", old, why, gr.log.has(why))
		}
		out, st, err = run("head -c 5; exit 3", blockingPipe(t, in))
		if err != nil || st.Code != 3 || out != string(in[:5]) {
			t.Errorf("head -c 5 (old service %v): %q %v %v", old, out, st, err)
		}
	}
	gr.svc.asOld.Store(false)
	// stdin whose writer never closes it: the command's exit ends the
	// client at once
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	out, st, err := run("echo done; exit 7", pr)
	if err != nil || st.Code != 7 || out != "done\n" {
		t.Errorf("stdin never closed: %q %v %v", out, st, err)
	}
	// a command that runs long after stdin's end: its stdin's link ends
	// first, the command goes on
	out, st, err = run("wc -c; sleep 0.3; echo after", blockingPipe(t, in[:1000]))
	if err != nil || st.Code != 0 || out != "1000\nafter\n" {
		t.Errorf("wc -c then more: %q %v %v", out, st, err)
	}
}

// A stdin link presents a token: one the service did not give out, or
// one given to another caller, is refused on both ends in the same
// words, and the command it was given for goes on, its stdin untouched.
func TestExecStdinLinkForged(t *testing.T) {
	gr := newGrid(t, aliceMap+`"/O=testgrid/OU=user/CN=bob" root`+"\n", false)
	alice, bob := gr.user(t, "alice"), gr.user(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	join := func(c *control.Client, token []byte) string {
		t.Helper()
		conn, err := c.Connect(ctx, control.ConnectRequest{Addr: "target:512"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write(AppendFrame(AppendFrame(nil, FrameJoin, token), FrameStdin, []byte("forged"))); err != nil {
			t.Fatal(err)
		}
		f, err := ReadFrame(conn, FromService)
		if err != nil || f.Type != FrameRefused {
			t.Fatalf("a forged stdin link: %q %v, want a refusal", f.Type, err)
		}
		return string(f.Data)
	}
	token := make([]byte, tokenSize)
	_, _ = rand.Read(token)
	if why := join(bob, token); !strings.Contains(why, "no command") || !gr.log.has(why) {
		t.Errorf("a token never given out: %q; want it named on both ends", why)
	}
	// alice's command, asked for by hand: its token, and bob presenting it
	conn, err := alice.Connect(ctx, control.ConnectRequest{Addr: "target:512"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(AppendFrame(nil, FrameRequest, []byte(`{"command":["cat"],"features":["stdin-link","not-yet"]}`))); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(conn, FromService)
	if err != nil || f.Type != FrameFeatures || f.Data[0] != featureStdinLink {
		t.Fatalf("the features: %q %x %v", f.Type, f.Data, err)
	}
	token = f.Data[1:]
	if f, err := ReadFrame(conn, FromService); err != nil || f.Type != FrameStarted {
		t.Fatalf("start: %q %v", f.Type, err)
	}
	if why := join(bob, token); !strings.Contains(why, "another caller") || !gr.log.has(why) {
		t.Errorf("alice's token presented by bob: %q; want it named on both ends", why)
	}
	// stdin in frames where it goes on a link: a protocol fault
	if _, err := conn.Write(AppendFrame(nil, FrameStdin, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := ReadFrame(conn, FromService)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == FrameExit {
			if st := parseExit(f.Data); st.Signal != int(syscall.SIGHUP) {
				t.Errorf("cat after stdin in frames on a stdin link's command: %v, want SIGHUP", st)
			}
			break
		}
	}
	if !gr.log.has("it goes on a link of its own") {
		t.Errorf("the service's log does not name the fault:\n%s", gr.log)
	}
}
