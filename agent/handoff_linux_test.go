package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// handoffPair starts agents alpha and beta; beta exposes a hash service
// (beta:2222) and a service that says "bye" and closes at once
// (beta:2223). It returns alpha's client.
func handoffPair(t *testing.T, ctx context.Context) *control.Client {
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
		ex, err := cb.Expose(ctx, control.ExposeRequest{Local: local, Port: port})
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
	s, err := ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2222"})
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
	s, err := ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2222"})
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
	s, err := ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2223"})
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

// A regular file and /dev/null handed as nc's stdin and stdout: the
// file's offset is shared, as if this process had read it.
func TestHandFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)
	dir := t.TempDir()
	msg := bytes.Repeat([]byte("filed "), 300000)
	if err := os.WriteFile(filepath.Join(dir, "in"), msg, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(filepath.Join(dir, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for _, w := range []*os.File{null, out} {
		in.Seek(0, io.SeekStart)
		s, err := ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2222"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Hand(in, w); err != nil {
			t.Fatalf("hand a file and %s: %v", w.Name(), err)
		}
		if err := s.Wait(); err != nil {
			t.Fatalf("wait: %v", err)
		}
		if off, _ := in.Seek(0, io.SeekCurrent); off != int64(len(msg)) {
			t.Errorf("input offset %d after the stream, want %d", off, len(msg))
		}
	}
	got, _ := os.ReadFile(filepath.Join(dir, "out"))
	if want := sha256.Sum256(msg); !bytes.Equal(got, want[:]) {
		t.Fatalf("output file %x, want %x", got, want)
	}
}

// What cannot be handed is not sent, and the stream carries the bytes
// through this process instead; closing a handed stream cuts it.
func TestHandRefusedAndCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := handoffPair(t, ctx)

	s, err := ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2222"})
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "regular"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	zero, err := os.Open("/dev/zero") // a device whose reads are not known never to wait
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	for _, ends := range [][]*os.File{{file}, {zero, file}} {
		if err := s.Hand(files(ends)...); !errors.Is(err, control.ErrNoHandoff) {
			t.Errorf("hand %d ends (%s...): %v, want ErrNoHandoff", len(ends), ends[0].Name(), err)
		}
	}
	// a plain TCP-joining of the stream still works.
	program, end := tcpPair(t)
	go func() { program.Write([]byte("x")); program.CloseWrite() }()
	c, err := s.Conn()
	if err != nil {
		t.Fatal(err)
	}
	go control.Join(end, c)
	got, _ := io.ReadAll(program)
	if want := sha256.Sum256([]byte("x")); !bytes.Equal(got, want[:]) {
		t.Fatalf("through this process: %x", got)
	}

	// cut: the program sees its connection end.
	s, err = ca.Open(ctx, control.ConnectRequest{Addr: "beta.grid:2222"})
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
	handoffPair(t, ctx)
	alpha := fmt.Sprintf("@gridlink-test-%d-alpha", os.Getpid())
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
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
		{"blocking pipes", control.ModeFDs, []int{int(r.Fd()), int(w.Fd())}, "blocking"},
		{"datagram socket", control.ModeFDs, []int{dg}, "not a stream socket"},
		{"a device", control.ModeFDs, []int{int(zero.Fd()), int(w.Fd())}, "neither"},
		{"bad choice", 'X', nil, "choice"},
		{"three descriptors", control.ModeFDs, []int{int(r.Fd()), int(w.Fd()), dg}, "descriptors"},
	} {
		conn, h := rawConnect(t, alpha, control.ConnectRequest{Addr: "beta.grid:2222", Handoff: true})
		if h.Get(control.HandoffHeader) != control.HandoffFDs {
			t.Fatalf("no %s header", control.HandoffHeader)
		}
		var oob []byte
		if len(tc.fds) > 0 {
			oob = unix.UnixRights(tc.fds...)
		}
		if _, _, err := conn.WriteMsgUnix([]byte{tc.mode}, oob, nil); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		ev, err := control.ReadEvent(conn)
		conn.Close()
		if err != nil || !strings.Contains(ev.Error, tc.want) {
			t.Errorf("%s: %+v %v, want an error about %q", tc.name, ev, err, tc.want)
		}
	}
}

// rawConnect sends a connect request to the agent at sock on a
// connection of its own, as a client that breaks the handoff protocol
// would, and returns the upgraded connection and the answer's header.
func rawConnect(t *testing.T, sock string, req control.ConnectRequest) (*net.UnixConn, http.Header) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", "http://agent/connect", bytes.NewReader(b))
	hr.Header.Set("Connection", "Upgrade")
	hr.Header.Set("Upgrade", control.StreamProto)
	br := bufio.NewReader(c)
	var resp *http.Response
	if err = hr.Write(c); err == nil {
		resp, err = http.ReadResponse(br, hr)
	}
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = control.ResponseError(resp)
	}
	if err == nil && br.Buffered() > 0 {
		err = fmt.Errorf("%d bytes after the answer", br.Buffered())
	}
	if err != nil {
		c.Close()
		t.Fatalf("connect: %v", err)
	}
	return c.(*net.UnixConn), resp.Header
}
