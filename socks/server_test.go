package socks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// fakeBackend: "echo.grid" echoes, "unknown.grid" is unknown,
// "closed.grid" refuses; Bind hands out a binding whose peer the test
// supplies on peers.
type fakeBackend struct {
	peers chan net.Conn
	mu    sync.Mutex
	bound int
	freed int
}

func (f *fakeBackend) Connect(ctx context.Context, a Addr) (net.Conn, error) {
	switch a.Host {
	case "echo.grid":
		x, y := tcpPair()
		go func() { _, _ = io.Copy(y, y); y.(*net.TCPConn).CloseWrite() }()
		return x, nil
	case "unknown.grid":
		return nil, &Error{ReplyHostUnreachable, errors.New("no such node")}
	case "closed.grid":
		return nil, &Error{ReplyRefused, errors.New("nothing listens")}
	}
	return nil, errors.New("boom")
}

type fakeBinding struct {
	f *fakeBackend
}

func (b *fakeBinding) Addr() Addr { return Addr{Host: "me.grid", Port: 49152} }
func (b *fakeBinding) Accept(ctx context.Context) (net.Conn, Addr, error) {
	select {
	case c := <-b.f.peers:
		return c, Addr{Host: "peer.grid", Port: 1}, nil
	case <-ctx.Done():
		return nil, Addr{}, ctx.Err()
	}
}
func (b *fakeBinding) Close() error {
	b.f.mu.Lock()
	b.f.freed++
	b.f.mu.Unlock()
	return nil
}

func (f *fakeBackend) Bind(ctx context.Context, a Addr) (Binding, error) {
	f.mu.Lock()
	f.bound++
	f.mu.Unlock()
	return &fakeBinding{f}, nil
}

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair() (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ch := make(chan net.Conn)
	go func() { c, _ := l.Accept(); ch <- c }()
	x, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		panic(err)
	}
	return x, <-ch
}

func startServer(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go s.Serve(l)
	return l.Addr().String()
}

// encodeRequest is the client side of a request, for tests.
func encodeRequest(cmd byte, a Addr) []byte {
	b := appendReply(nil, cmd, a) // same layout: VER CMD RSV ATYP ADDR PORT
	return b
}

// request greets without authentication, sends a request and returns the
// connection and the reply's code and address.
func request(t *testing.T, addr string, raw []byte) (net.Conn, byte, Addr) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rep, a := requestOn(t, c, raw)
	return c, rep, a
}

// requestOn is request on the connection c.
func requestOn(t *testing.T, c net.Conn, raw []byte) (byte, Addr) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte{5, 1, MethodNone})
	var ch [2]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil || ch != [2]byte{5, 0} {
		t.Fatalf("method choice %v, %v", ch, err)
	}
	c.Write(raw)
	rep, a, err := readReply(c)
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	return rep, a
}

// readReply decodes a reply (same layout as a request).
func readReply(r io.Reader) (byte, Addr, error) {
	req, err := readRequest(r)
	return req.Cmd, req.Addr, err
}

func TestConnectHalfClose(t *testing.T) {
	addr := startServer(t, &Server{Backend: &fakeBackend{}})
	c, rep, _ := request(t, addr, encodeRequest(CmdConnect, Addr{Host: "echo.grid", Port: 22}))
	defer c.Close()
	if rep != ReplySucceeded {
		t.Fatalf("reply %#x", rep)
	}
	msg := bytes.Repeat([]byte("gridlink "), 10000)
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through CONNECT: %d bytes, %v (sent %d)", len(got), err, len(msg))
	}
}

func TestReplyCodes(t *testing.T) {
	addr := startServer(t, &Server{Backend: &fakeBackend{}})
	domain := func(cmd byte, host string) []byte { return encodeRequest(cmd, Addr{Host: host, Port: 80}) }
	for _, tc := range []struct {
		name string
		raw  []byte
		want byte
	}{
		{"unknown name", domain(CmdConnect, "unknown.grid"), ReplyHostUnreachable},
		{"refused", domain(CmdConnect, "closed.grid"), ReplyRefused},
		{"backend failure", domain(CmdConnect, "other"), ReplyGeneralFailure},
		{"udp associate", domain(CmdAssociate, "echo.grid"), ReplyCmdNotSupported},
		{"command 9", domain(9, "echo.grid"), ReplyCmdNotSupported},
		{"address type 2", []byte{5, 1, 0, 2, 1, 2, 3, 4, 0, 80}, ReplyAtypNotSupported},
		{"reserved byte", []byte{5, 1, 7, 1, 1, 2, 3, 4, 0, 80}, ReplyGeneralFailure},
		{"empty name", []byte{5, 1, 0, 3, 0, 0, 80}, ReplyGeneralFailure},
		{"name with a NUL", []byte{5, 1, 0, 3, 2, 'a', 0, 0, 80}, ReplyGeneralFailure},
	} {
		c, rep, _ := request(t, addr, tc.raw)
		c.Close()
		if rep != tc.want {
			t.Errorf("%s: reply %#x, want %#x", tc.name, rep, tc.want)
		}
	}
	// after all that, a good client is served.
	c, rep, _ := request(t, addr, domain(CmdConnect, "echo.grid"))
	defer c.Close()
	if rep != ReplySucceeded {
		t.Fatalf("good client after bad ones: reply %#x", rep)
	}
}

func TestBadGreetingAndTimeout(t *testing.T) {
	var logs []string
	var mu sync.Mutex
	s := &Server{Backend: &fakeBackend{}, HandshakeTimeout: 200 * time.Millisecond,
		Logf: func(f string, a ...any) { mu.Lock(); logs = append(logs, f); mu.Unlock() }}
	addr := startServer(t, s)
	for _, raw := range [][]byte{{5, 0}, {5, 2, 0}} { // (SOCKS4: TestProtocolReplies)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(raw)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		b, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%v: the server did not close the connection: %v", raw, err)
		}
		if len(b) > 0 {
			t.Errorf("%v: answered %v, want the connection closed", raw, b)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%v: closed after %v", raw, d)
		}
		c.Close()
	}
	// no acceptable method: a loopback client offering only a password.
	c, _ := net.Dial("tcp", addr)
	defer c.Close()
	c.Write([]byte{5, 1, MethodPassword})
	var ch [2]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil || ch != [2]byte{5, MethodNoneOK} {
		t.Errorf("password-only offer on loopback: %v, %v", ch, err)
	}
}

func TestPasswordAuth(t *testing.T) {
	s := &Server{Backend: &fakeBackend{}, Users: map[string]string{"alice": "s3cret"}, AuthDelay: time.Millisecond}
	try := func(user, pass string) (byte, byte) {
		a, b := net.Pipe() // not loopback: authentication required
		defer a.Close()
		go s.ServeConn(b)
		a.SetDeadline(time.Now().Add(5 * time.Second))
		a.Write([]byte{5, 2, MethodNone, MethodPassword})
		var ch [2]byte
		if _, err := io.ReadFull(a, ch[:]); err != nil || ch[1] != MethodPassword {
			t.Fatalf("choice %v %v", ch, err)
		}
		msg := append([]byte{1, byte(len(user))}, user...)
		msg = append(append(msg, byte(len(pass))), pass...)
		a.Write(msg)
		var st [2]byte
		if _, err := io.ReadFull(a, st[:]); err != nil {
			t.Fatal(err)
		}
		if st[1] != 0 {
			return st[1], 0xff
		}
		a.Write(encodeRequest(CmdConnect, Addr{Host: "unknown.grid", Port: 1}))
		rep, _, err := readReply(a)
		if err != nil {
			t.Fatal(err)
		}
		return st[1], rep
	}
	if st, rep := try("alice", "s3cret"); st != 0 || rep != ReplyHostUnreachable {
		t.Errorf("good password: status %d reply %#x", st, rep)
	}
	if st, _ := try("alice", "wrong"); st == 0 {
		t.Errorf("wrong password accepted")
	}
	if st, _ := try("bob", "s3cret"); st == 0 {
		t.Errorf("unknown user accepted")
	}
	// without users, a non-loopback client is refused outright.
	a, b := net.Pipe()
	defer a.Close()
	go (&Server{Backend: &fakeBackend{}}).ServeConn(b)
	a.Write([]byte{5, 1, MethodNone})
	var ch [2]byte
	if _, err := io.ReadFull(a, ch[:]); err != nil || ch[1] != MethodNoneOK {
		t.Errorf("no users, remote client: choice %v %v", ch, err)
	}
}

func TestBind(t *testing.T) {
	f := &fakeBackend{peers: make(chan net.Conn, 1)}
	addr := startServer(t, &Server{Backend: f})
	c, rep, bound := request(t, addr, encodeRequest(CmdBind, Addr{IP: ipv4zero(), Port: 0}))
	defer c.Close()
	if rep != ReplySucceeded || bound.Host != "me.grid" || bound.Port != 49152 {
		t.Fatalf("first reply %#x %v", rep, bound)
	}
	x, y := tcpPair()
	defer x.Close()
	f.peers <- y
	rep, from, err := readReply(c)
	if err != nil || rep != ReplySucceeded || from.Host != "peer.grid" {
		t.Fatalf("second reply %#x %v %v", rep, from, err)
	}
	x.Write([]byte("from the peer"))
	x.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(io.LimitReader(c, 13))
	if string(got) != "from the peer" {
		t.Fatalf("got %q", got)
	}
	c.Write([]byte("back"))
	c.(*net.TCPConn).CloseWrite()
	back, _ := io.ReadAll(x)
	if string(back) != "back" {
		t.Fatalf("peer got %q", back)
	}
}

func TestBindClientGone(t *testing.T) {
	f := &fakeBackend{peers: make(chan net.Conn)}
	addr := startServer(t, &Server{Backend: f})
	c, rep, _ := request(t, addr, encodeRequest(CmdBind, Addr{IP: ipv4zero()}))
	if rep != ReplySucceeded {
		t.Fatalf("reply %#x", rep)
	}
	c.Close()
	testwait.Until(t, "the binding closed when its client went away", 5*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.freed != 0
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.freed != 1 {
		t.Errorf("the binding was freed %d times, want once", f.freed)
	}
}

func TestCode(t *testing.T) {
	wrapped := errors.Join(errors.New("x"), &Error{ReplyRefused, errors.New("r")})
	if Code(wrapped) != ReplyRefused || Code(context.DeadlineExceeded) != ReplyTTLExpired || Code(errors.New("x")) != ReplyGeneralFailure {
		t.Fatal("Code maps errors wrongly")
	}
}

func TestReplyEncoding(t *testing.T) {
	b := appendReply(nil, 0, Addr{Host: "n.grid", Port: 258})
	want := append([]byte{5, 0, 0, 3, 6}, "n.grid"...)
	want = binary.BigEndian.AppendUint16(want, 258)
	if !bytes.Equal(b, want) {
		t.Fatalf("reply %v, want %v", b, want)
	}
	if b := appendReply(nil, 1, Addr{}); !bytes.Equal(b, []byte{5, 1, 0, 1, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("zero reply %v", b)
	}
}
