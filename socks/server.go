// Package socks is a SOCKS5 server (RFC 1928, with RFC 1929
// username/password) for programs that cannot link gridlink: CONNECT
// reaches overlay names (NAME.grid:PORT), BIND listens on the overlay for
// a peer, as the Nexus Proxy relayed connect and bind for Globus.
//
// The server is independent of the transport: a Backend dials and binds.
// AgentBackend is the one gridlink uses, through the node agent. The
// package owns the wire format (strict decoders, fuzzed), the reply codes
// and per-client handshake timeouts; one bad client never disturbs
// another. It leaves out UDP ASSOCIATE (reply 0x07), GSSAPI and SOCKS4.
//
// Who is served: the server dials and binds with its agent's credentials,
// so it serves only its own user. A client on this host (whatever
// address it connects to) is served when the kernel says its socket is
// this process's uid's or root's (package peercred: the kernel's socket
// table); any other account gets the reply "connection not allowed by
// ruleset" (0x02) to its request, and the log says
//
//	socks of uid N refuses uid M
//
// A client the kernel cannot place on this host (one on another host, or
// a connection that is no socket) must give a username and password from
// Server.Users, and is refused when it is empty: a password admits remote
// clients only, never another account of this host. Failed guesses are
// throttled per source address (throttle.go).
package socks

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gridlink/gridlink/peercred"
)

// Backend dials and binds for the server.
type Backend interface {
	// Connect dials a.
	Connect(ctx context.Context, a Addr) (net.Conn, error)
	// Bind listens for one connection from the peer a names (the
	// client's DST.ADDR, RFC 1928: the address it expects the peer at),
	// refusing others.
	Bind(ctx context.Context, a Addr) (Binding, error)
}

// Binding is a listener for one connection.
type Binding interface {
	// Addr is where the peer should connect.
	Addr() Addr
	// Accept waits for the peer (or ctx) and returns its connection and
	// address.
	Accept(ctx context.Context) (net.Conn, Addr, error)
	Close() error
}

// Error carries the reply code a Backend wants the client to get.
type Error struct {
	Code byte
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Code is the reply code for err: that of an *Error in its chain, a TTL
// expiry for timeouts, else general failure.
func Code(err error) byte {
	var e *Error
	switch {
	case err == nil:
		return ReplySucceeded
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.DeadlineExceeded):
		return ReplyTTLExpired
	}
	return ReplyGeneralFailure
}

// Server is a SOCKS5 server. The zero value (with a Backend) serves
// loopback clients without authentication.
type Server struct {
	Backend Backend
	// Users are the usernames and passwords of non-loopback clients.
	Users map[string]string
	// HandshakeTimeout bounds greeting, authentication and request
	// (default 10s); ConnectTimeout a CONNECT's dial (default 60s);
	// BindTimeout the wait for a BIND's peer (default 5 min).
	HandshakeTimeout, ConnectTimeout, BindTimeout time.Duration
	// AuthDelay delays the answer to a failed authentication, doubling
	// with each failure from the same address up to AuthDelayMax; the
	// next attempt from there waits as long (see throttle.go). Defaults
	// 500ms and 8s. MaxPendingAuth bounds the authentications under way
	// (default 64).
	AuthDelay, AuthDelayMax time.Duration
	MaxPendingAuth          int
	// Logf, if set, receives one line per failed request.
	Logf func(format string, args ...any)

	auth throttle
}

// Serve accepts clients on l until it fails, each in its own goroutine.
func (s *Server) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go s.ServeConn(c)
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// ServeConn serves one client and closes c.
func (s *Server) ServeConn(c net.Conn) {
	defer c.Close()
	deadline := time.Now().Add(orDefault(s.HandshakeTimeout, 10*time.Second))
	_ = c.SetDeadline(deadline)
	want, refused := admit(c)
	req, err := s.handshake(c, deadline, want)
	if refused != nil {
		// the refused client hears it in its request's reply
		if err == nil {
			s.reply(c, ReplyNotAllowed, Addr{})
		}
		s.logf("socks: %s: %v", c.RemoteAddr(), refused)
		lingerClose(c)
		return
	}
	if err != nil {
		s.logf("socks: %s: %v", c.RemoteAddr(), err)
		lingerClose(c)
		return
	}
	_ = c.SetDeadline(time.Time{})
	switch req.Cmd {
	case CmdConnect:
		err = s.connect(c, req)
	case CmdBind:
		err = s.bind(c, req)
	default:
		err = fmt.Errorf("command %#x not supported", req.Cmd)
		s.reply(c, ReplyCmdNotSupported, Addr{})
	}
	if err != nil {
		s.logf("socks: %s: %v", c.RemoteAddr(), err)
	}
}

// admit decides who c's client is: this user's or root's socket on this
// host needs no authentication (MethodNone); a client the kernel does not
// place on this host (another host's, or no socket) must authenticate
// (MethodPassword); another account, or one the kernel does not name, is
// refused (a *peercred.RefusedError or *peercred.UnknownError), after a
// handshake without authentication so that its request can be answered.
func admit(c net.Conn) (want byte, refused error) {
	if !isSocket(c.RemoteAddr()) {
		return MethodPassword, nil
	}
	err := peercred.Admit("socks", c)
	switch {
	case err == nil:
		return MethodNone, nil
	case errors.Is(err, peercred.ErrNotLocal) && !isLoopback(c.RemoteAddr()):
		return MethodPassword, nil
	}
	return MethodNone, err
}

// handshake negotiates the method want, authenticates and reads the
// request, answering a bad one.
func (s *Server) handshake(c net.Conn, deadline time.Time, want byte) (Request, error) {
	methods, err := readGreeting(c)
	if errors.Is(err, errSocks4) {
		_, _ = c.Write([]byte{0, Socks4Rejected, 0, 0, 0, 0, 0, 0})
	}
	if err != nil {
		return Request{}, err
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered || (want == MethodPassword && len(s.Users) == 0) {
		_, _ = c.Write([]byte{version, MethodNoneOK})
		return Request{}, fmt.Errorf("no acceptable method among %v (want %#x)", methods, want)
	}
	if _, err := c.Write([]byte{version, want}); err != nil {
		return Request{}, err
	}
	if want == MethodPassword {
		if err := s.authenticate(c, deadline); err != nil {
			return Request{}, err
		}
	}
	req, err := readRequest(c)
	if err != nil {
		code := byte(ReplyGeneralFailure)
		if errors.Is(err, errAtyp) {
			code = ReplyAtypNotSupported
		}
		s.reply(c, code, Addr{})
		return Request{}, err
	}
	return req, nil
}

// authenticate reads and checks a username and password, throttled
// (throttle.go), and answers.
func (s *Server) authenticate(c net.Conn, deadline time.Time) error {
	max := s.MaxPendingAuth
	if max <= 0 {
		max = defaultMaxPendingAuth
	}
	s.auth.init(max)
	if err := s.auth.acquire(); err != nil {
		_, _ = c.Write([]byte{authVersion, 1})
		return err
	}
	defer s.auth.release()
	user, pass, err := readAuth(c)
	if err != nil {
		return err
	}
	src := sourceKey(c.RemoteAddr())
	good, delay, err := s.auth.check(src, deadline, orDefault(s.AuthDelay, defaultAuthDelay), orDefault(s.AuthDelayMax, defaultAuthDelayMax),
		func() bool { return s.check(user, pass) })
	if err != nil {
		_, _ = c.Write([]byte{authVersion, 1})
		return fmt.Errorf("user %q: %w", user, err)
	}
	if !good {
		time.Sleep(delay)
		_, _ = c.Write([]byte{authVersion, 1})
		return fmt.Errorf("user %q: bad username or password (answered after %v)", user, delay)
	}
	_, err = c.Write([]byte{authVersion, 0})
	return err
}

func (s *Server) check(user, pass string) bool {
	want, ok := s.Users[user]
	// compare in constant time even for an unknown user.
	eq := subtle.ConstantTimeCompare([]byte(want), []byte(pass)) == 1
	return ok && eq
}

func isLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// isSocket says whether a is a TCP or unix socket's address: one the
// kernel can say the owner of.
func isSocket(a net.Addr) bool {
	switch a.(type) {
	case *net.TCPAddr, *net.UnixAddr:
		return true
	}
	return false
}

// lingerClose ends a connection the server refused after answering it:
// it half-closes and reads what the client still sends (a bounded time
// and amount), so that closing does not reset the connection (a socket
// closed with unread data sends a reset, which can discard the answer
// at the client before it reads it).
func lingerClose(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// lingerTime and lingerBytes bound lingerClose's reading.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 64 << 10
)

func (s *Server) reply(c net.Conn, rep byte, a Addr) error {
	_, err := c.Write(appendReply(nil, rep, a))
	return err
}

func (s *Server) connect(c net.Conn, req Request) error {
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(s.ConnectTimeout, 60*time.Second))
	defer cancel()
	up, err := s.Backend.Connect(ctx, req.Addr)
	if err != nil {
		s.reply(c, Code(err), Addr{})
		return fmt.Errorf("connect %s: %w", req.Addr, err)
	}
	defer up.Close()
	if err := s.reply(c, ReplySucceeded, Addr{}); err != nil {
		return err
	}
	if err := join(c, up); err != nil {
		return fmt.Errorf("connect %s: %w", req.Addr, err)
	}
	return nil
}

func (s *Server) bind(c net.Conn, req Request) error {
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(s.BindTimeout, 5*time.Minute))
	defer cancel()
	b, err := s.Backend.Bind(ctx, req.Addr)
	if err != nil {
		s.reply(c, Code(err), Addr{})
		return fmt.Errorf("bind: %w", err)
	}
	defer b.Close()
	if err := s.reply(c, ReplySucceeded, b.Addr()); err != nil {
		return err
	}
	// the client sends nothing until the second reply: a read that ends,
	// with bytes or without, means it gave up or broke the protocol.
	watch := make(chan bool)
	go func() {
		var one [1]byte
		n, _ := c.Read(one[:])
		cancel()
		watch <- n > 0
	}()
	peer, from, err := b.Accept(ctx)
	_ = c.SetReadDeadline(time.Now())
	early := <-watch
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && early {
		peer.Close()
		err = errors.New("the client sent data before the second reply")
	}
	if err != nil {
		s.reply(c, Code(err), Addr{})
		return fmt.Errorf("bind at %s: %w", b.Addr(), err)
	}
	defer peer.Close()
	if err := s.reply(c, ReplySucceeded, from); err != nil {
		return err
	}
	relay(c, peer)
	return nil
}
