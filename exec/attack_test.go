package exec

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/proxy"
)

// A proxy restricted to another service, or to exec at another node, is
// refused in the handshake, named on both ends; exec, or exec at this
// node, is admitted.
func TestExecRestrictedProxy(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.g.User(t, "alice")
	self := gr.target.Node().ID().String()
	run := func(name string, restrict ...string) error {
		c := gr.caller(t, name, gr.g.Proxy(t, alice, proxy.Options{Restrict: restrict}))
		_, _, _, err := output(t, c, Request{Command: []string{"true"}}, nil)
		return err
	}
	if err := run("p-exec", "exec"); err != nil {
		t.Errorf("a proxy restricted to exec: %v", err)
	}
	if err := run("p-exec-here", "exec@"+self); err != nil {
		t.Errorf("a proxy restricted to exec at the target: %v", err)
	}
	why := "may not use exec at target: its proxy is restricted to [echo]"
	err := run("p-echo", "echo")
	t.Logf("a proxy restricted to echo: %v", err)
	var se *control.StreamError
	if !errors.As(err, &se) || se.Kind != control.KindNotAllowed || strings.Count(err.Error(), why) != 1 {
		t.Errorf("a proxy restricted to echo: %v; want the agent's end reason, of kind %s, once", err, control.KindNotAllowed)
	}
	if err == nil || !strings.Contains(err.Error(), why) || !gr.log.has(why) {
		t.Errorf("a proxy restricted to echo: %v; want %q on both ends", err, why)
	}
	other := "exec@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"
	why = "may not use exec at target: its proxy is restricted to [exec at node 3qv3ylp4bh], and this node is"
	if err := run("p-elsewhere", other); err == nil || !strings.Contains(err.Error(), why) || !gr.log.has(why) {
		t.Errorf("a proxy restricted to exec at another node: %v; want %q on both ends", err, why)
	}
}

// A connection made before its caller was revoked runs nothing after:
// either the service, which asks the node's trust as it is now before it
// acts, refuses naming the revocation, or the node cuts the connection,
// which it does not explain to the caller: then the client's probe (a new
// connection, refused in its handshake) names it.
func TestExecRevokedOnOpenConnection(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	user := gr.g.User(t, "alice")
	alice := gr.caller(t, "alice-node", gr.g.Proxy(t, user, proxy.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := alice.Open(ctx, control.ConnectRequest{Addr: "target:512"})
	if err != nil {
		t.Fatal(err)
	}
	gr.g.Revoke(t, user.Chain[0])
	mark := filepath.Join(t.TempDir(), "ran")
	_, err = runStream(ctx, alice, s, "target", control.LinkOptions{}, Request{Command: []string{"touch " + mark}}, IO{}, nil)
	t.Logf("revoked on an open connection: %v", err)
	if err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked caller on a connection made before: %v; want the revocation named", err)
	}
	var re *RefusedError
	if errors.As(err, &re) && (!strings.Contains(re.Reason, "is no longer admitted at target") || !gr.log.has(re.Reason)) {
		t.Errorf("refused as %q; want the revocation named on both ends", re.Reason)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the command ran")
	}
}

// A revoked user is refused. Her agent's next exec may go over a spare
// connection judged before the revocation, which the node cuts only once
// the news has gone round: without the service's own recheck the command
// ran (3 of 20 runs).
func TestExecRevoked(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	user := gr.g.User(t, "alice")
	alice := gr.caller(t, "alice-node", gr.g.Proxy(t, user, proxy.Options{}))
	if _, _, _, err := output(t, alice, Request{Command: []string{"true"}}, nil); err != nil {
		t.Fatal(err)
	}
	gr.g.Revoke(t, user.Chain[0])
	_, _, _, err := output(t, alice, Request{Command: []string{"true"}}, nil)
	t.Logf("revoked: %v", err)
	if err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked user's exec: %v; want refused as revoked", err)
	}
}

// An open grid has no subjects to map: exec is refused, saying so.
func TestExecOpenGridRefused(t *testing.T) {
	gr := newGrid(t, aliceMap, true)
	c := gr.caller(t, "anyone", nil)
	_, _, _, err := output(t, c, Request{Command: []string{"true"}}, nil)
	var re *RefusedError
	why := "exec needs a grid CA: "
	if !errors.As(err, &re) || !strings.HasPrefix(re.Reason, why) || !strings.Contains(re.Reason, "node target runs an open grid") || !gr.log.has(re.Reason) {
		t.Errorf("exec in an open grid: %v; want a refusal %q... on both ends", err, why)
	}
}

// A caller that goes away takes its command with it: SIGHUP to the
// process group, as a closed terminal does.
func TestExecCallerGoneHangsUp(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := execAt(ctx, alice, Request{Command: []string{"echo $$; sleep 100"}}, IO{Stdout: pw})
		done <- err
	}()
	line := make([]byte, 0, 16)
	b := make([]byte, 1)
	for {
		if _, err := pr.Read(b); err != nil {
			t.Fatal(err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	pid, err := strconv.Atoi(string(line))
	if err != nil {
		t.Fatalf("pid %q: %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its context ended: %v", err)
	}
	testwait.Until(t, "the command to be hung up", 10*time.Second, func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		return err != nil
	})
	testwait.Until(t, "the target to log the hangup", 10*time.Second, func() bool { return gr.log.has(errClientGone.Error()) })
}

// A malicious service (or anything posing as one on the way) forging
// frames: the client fails with a clear error, never crashes or writes
// what it was not sent.
func TestExecForgedFrames(t *testing.T) {
	frame := func(typ byte, data ...byte) []byte { return AppendFrame(nil, typ, data) }
	credit := func(n uint32) []byte { return AppendFrame(nil, FrameCredit, binary.BigEndian.AppendUint32(nil, n)) }
	for _, tc := range []struct {
		name  string
		sends [][]byte
		says  string
	}{
		{"exit before the start", [][]byte{frame(FrameExit, 0, 0)}, `frame 'X': before the command started`},
		{"output before the start", [][]byte{frame(FrameStdout, 'x')}, `frame 'o': before the command started`},
		{"a second start", [][]byte{frame(FrameStarted), frame(FrameStarted)}, `frame 'A': after the command started`},
		{"a refusal after the start", [][]byte{frame(FrameStarted), frame(FrameRefused, 'n', 'o')}, `frame 'R': after the command started`},
		{"credit never owed", [][]byte{frame(FrameStarted), credit(Window)}, `credit for 4194304 bytes when 0 are outstanding`},
		{"a client's frame", [][]byte{frame(FrameStarted), frame(FrameStdin, 'x')}, `frame 'i': sent by the wrong end`},
		{"an unknown frame", [][]byte{frame(FrameStarted), frame('?', 1)}, `frame '?': unknown frame type`},
		{"a 4 GiB frame", [][]byte{frame(FrameStarted), {FrameStdout, 0xff, 0xff, 0xff, 0xff}}, `4294967295 bytes, want 1..262144`},
		{"signal 0", [][]byte{frame(FrameStarted), frame(FrameExit, 1, 0)}, `exit status kind 1 value 0`},
		{"a refusal with a terminal escape", [][]byte{frame(FrameRefused, 0x1b, '[', '2', 'J')}, `reason: control characters`},
		{"a cut frame", [][]byte{frame(FrameStarted), frame(FrameStdout, 'a', 'b')[:6]}, `frame 'o' cut short`},
		{"no exit status", [][]byte{frame(FrameStarted), frame(FrameStdout, 'a')}, `the connection ended before the command's exit status`},
	} {
		client, evil := net.Pipe()
		go func() {
			defer evil.Close()
			if _, err := ReadFrame(evil, FromClient); err != nil {
				return
			}
			go io.Copy(io.Discard, evil)
			for _, b := range tc.sends {
				if _, err := evil.Write(b); err != nil {
					return
				}
			}
		}()
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := Run(ctx, client, "evil", Request{Command: []string{"true"}}, IO{Stdout: &out})
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "exec at evil") && !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: %v %v; want an error saying %q", tc.name, st, err, tc.says)
		}
		if tc.name != "no exit status" && out.Len() > 0 && !strings.Contains(tc.name, "cut") {
			t.Errorf("%s: wrote %q", tc.name, out.String())
		}
	}
}

// The commands running at once are bounded; more are refused, named,
// until one ends.
func TestExecMaxCommands(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	gr.svc.Close()
	svc, err := Listen(gr.target.Node(), Config{Mapfile: gr.mapfile, Logf: gr.log.logf, MaxCommands: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	alice := gr.user(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	sr, sw := io.Pipe()
	first := make(chan error, 1)
	go func() {
		_, err := execAt(ctx, alice, Request{Command: []string{"echo ready; read x"}}, IO{Stdin: sr, Stdout: pw})
		first <- err
	}()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(pr, buf); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = output(t, alice, Request{Command: []string{"true"}}, nil)
	why := "target runs 1 commands already, the most its exec service allows at once"
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != why || !gr.log.has(why) {
		t.Errorf("a second command: %v; want %q on both ends", err, why)
	}
	sw.Close()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := output(t, alice, Request{Command: []string{"true"}}, nil); err != nil {
		t.Errorf("after the first ended: %v", err)
	}
}

// failAfter is an output that keeps its first line and fails once it has
// taken n bytes (a reader that went away, as head does).
type failAfter struct {
	n     int
	first strings.Builder
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.first.Len() == 0 || !strings.Contains(f.first.String(), "\n") {
		f.first.Write(p[:min(len(p), 64)])
	}
	if f.n -= len(p); f.n < 0 {
		return 0, errors.New("broken pipe")
	}
	return len(p), nil
}

// A caller whose output goes nowhere (gridlink exec NODE yes | head)
// ends, and its command is hung up rather than left running.
func TestExecOutputGone(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := &failAfter{n: 1 << 20}
	_, err := execAt(ctx, alice, Request{Command: []string{"echo $$; exec yes"}}, IO{Stdout: out})
	if err == nil || !strings.Contains(err.Error(), "writing its output: broken pipe") {
		t.Fatalf("yes into a broken output: %v", err)
	}
	pid, _, _ := strings.Cut(out.first.String(), "\n")
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("pid %q", pid)
	}
	testwait.Until(t, "yes to be hung up", 10*time.Second, func() bool {
		_, err := os.Stat("/proc/" + pid)
		return err != nil
	})
}

// A request too large for the protocol is refused before it is sent.
func TestExecRequestTooLarge(t *testing.T) {
	client, other := net.Pipe()
	defer other.Close()
	_, err := Run(context.Background(), client, "n1", Request{Env: []string{"BIG=" + strings.Repeat("x", MaxRequest)}}, IO{})
	if err == nil || !strings.Contains(err.Error(), "at most 65536") {
		t.Errorf("a huge request: %v", err)
	}
}
