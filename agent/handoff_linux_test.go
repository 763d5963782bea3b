package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handoffPair starts agents alpha and beta; beta exposes a hash service
// (beta:2222) and a service that says "bye" and closes at once
// (beta:2223). It returns alpha's client.
func handoffPair(t *testing.T, ctx context.Context) *Client {
	t.Helper()
	hubAddr := startHub(t)
	_, ca := startAgent(t, "alpha", hubAddr)
	_, cb := startAgent(t, "beta", hubAddr)
	bye, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bye.Close() })
	go func() {
		for {
			c, err := bye.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("bye"))
			c.Close()
		}
	}()
	for port, local := range map[uint16]string{2222: hashServer(t), 2223: bye.Addr().String()} {
		ex, err := cb.Expose(ctx, ExposeRequest{Local: local, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
	}
	return ca
}

// blockingPipe is a pipe in blocking mode, as stdin and stdout are.
func blockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(p[0]), "pipe-r"), os.NewFile(uintptr(p[1]), "pipe-w")
}

// tcpPair is a connected pair of loopback TCP sockets.
func tcpPair(t *testing.T) (program, end *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// A socket handed to the agent: its bytes reach the service, its
// half-close too, the answer comes back, all without this process once
// Hand has returned (the socket is closed here at once); Wait reports the
// end.
func TestHandSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)
	s, err := ca.Open(ctx, ConnectRequest{Addr: "beta.grid:2222"})
	if err != nil {
		t.Fatal(err)
	}
	program, end := tcpPair(t)
	if err := s.Hand(end); err != nil {
		t.Fatalf("hand a TCP socket: %v", err)
	}
	end.Close()
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }()
	msg := bytes.Repeat([]byte("handed "), 300000)
	go func() { program.Write(msg); program.CloseWrite() }()
	got, err := io.ReadAll(program)
	want := sha256.Sum256(msg)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("answer %x, %v; want %x", got, err, want)
	}
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}
	// a second way for the same stream is refused.
	if err := s.Hand(end); err == nil {
		t.Error("handed twice")
	}
}

// Two pipes handed as nc hands stdin and stdout: the read end's EOF
// half-closes the link, the answer arrives on the write end, then EOF
// once the agent has closed its write end. The caller's pipe ends keep
// their blocking mode: the agent got descriptions of its own.
func TestHandPipes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)
	s, err := ca.Open(ctx, ConnectRequest{Addr: "beta.grid:2222"})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := blockingPipe(t)
	outR, outW := blockingPipe(t)
	defer inW.Close()
	defer outR.Close()
	// dups share the descriptions of inR and outW: their flags tell
	// whether the agent changed them.
	dupIn, _ := unix.Dup(int(inR.Fd()))
	dupOut, _ := unix.Dup(int(outW.Fd()))
	if err := s.Hand(inR, outW); err != nil {
		t.Fatalf("hand two pipes: %v", err)
	}
	inR.Close()
	outW.Close()
	msg := bytes.Repeat([]byte("piped "), 300000)
	go func() { inW.Write(msg); inW.Close() }()
	got := make([]byte, sha256.Size)
	_, err = io.ReadFull(outR, got)
	want := sha256.Sum256(msg)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("answer %x, %v; want %x", got, err, want)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}
	for _, fd := range []int{dupIn, dupOut} {
		if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK != 0 {
			t.Errorf("the caller's pipe end (fd %d) became non-blocking", fd)
		}
		unix.Close(fd)
	}
	// the agent's write end was the last but the dup: now EOF.
	if n, err := outR.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the answer: %d bytes, %v; want EOF", n, err)
	}
}

// As nc: the stream ends when the far side's bytes end, though the read
// end is still open.
func TestHandPipesFarSideFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)
	s, err := ca.Open(ctx, ConnectRequest{Addr: "beta.grid:2223"})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := blockingPipe(t)
	outR, outW := blockingPipe(t)
	defer inR.Close()
	defer inW.Close() // never closed before the end
	defer outR.Close()
	if err := s.Hand(inR, outW); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	got, err := io.ReadAll(outR)
	if err != nil || string(got) != "bye" {
		t.Fatalf("got %q, %v", got, err)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}
}

// What cannot be handed is not sent, and the stream carries the bytes
// through this process instead; closing a handed stream cuts it.
func TestHandRefusedAndCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)

	s, err := ca.Open(ctx, ConnectRequest{Addr: "beta.grid:2222"})
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "regular"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	_, w, _ := os.Pipe()
	defer w.Close()
	for _, ends := range [][]*os.File{{file}, {file, w}} {
		if err := s.Hand(files(ends)...); !errors.Is(err, ErrNoHandoff) {
			t.Errorf("hand %d ends with a regular file: %v, want ErrNoHandoff", len(ends), err)
		}
	}
	// a plain TCP-joining of the stream still works.
	program, end := tcpPair(t)
	go func() { program.Write([]byte("x")); program.CloseWrite() }()
	c, err := s.Conn()
	if err != nil {
		t.Fatal(err)
	}
	go Join(end, c)
	got, _ := io.ReadAll(program)
	if want := sha256.Sum256([]byte("x")); !bytes.Equal(got, want[:]) {
		t.Fatalf("through this process: %x", got)
	}

	// cut: the program sees its connection end.
	s, err = ca.Open(ctx, ConnectRequest{Addr: "beta.grid:2222"})
	if err != nil {
		t.Fatal(err)
	}
	program, end = tcpPair(t)
	if err := s.Hand(end); err != nil {
		t.Fatal(err)
	}
	end.Close()
	s.Close()
	program.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := program.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the cut: %v, want EOF", err)
	}
}

func files(fs []*os.File) []syscall.Conn {
	var cs []syscall.Conn
	for _, f := range fs {
		cs = append(cs, f)
	}
	return cs
}

// The agent refuses ends it cannot serve safely, with an error line: a
// blocking pipe (its reads could not be interrupted), a datagram socket,
// a wrong choice byte.
func TestHandoffAgentChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	dg, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dg)
	for _, tc := range []struct {
		name string
		mode byte
		fds  []int
		want string
	}{
		{"blocking pipes", modeFDs, []int{int(r.Fd()), int(w.Fd())}, "blocking"},
		{"datagram socket", modeFDs, []int{dg}, "not a stream socket"},
		{"bad choice", 'X', nil, "choice"},
		{"three descriptors", modeFDs, []int{int(r.Fd()), int(w.Fd()), dg}, "descriptors"},
	} {
		conn, h, err := ca.stream(ctx, "/connect", ConnectRequest{Addr: "beta.grid:2222", Handoff: true})
		if err != nil {
			t.Fatal(err)
		}
		if h.Get(handoffHeader) != handoffFDs {
			t.Fatalf("no %s header", handoffHeader)
		}
		var oob []byte
		if len(tc.fds) > 0 {
			oob = unix.UnixRights(tc.fds...)
		}
		if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte{tc.mode}, oob, nil); err != nil {
			t.Fatal(err)
		}
		err = (&Stream{raw: conn}).Wait()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}
