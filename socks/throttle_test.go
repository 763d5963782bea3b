package socks

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// offerPassword greets s over a pipe (not loopback: a password is asked)
// and returns the client's end after the server chose the method.
func offerPassword(t *testing.T, s *Server) net.Conn {
	t.Helper()
	a, b := net.Pipe()
	go s.ServeConn(b)
	a.SetDeadline(time.Now().Add(10 * time.Second))
	a.Write([]byte{5, 1, MethodPassword})
	var ch [2]byte
	if _, err := io.ReadFull(a, ch[:]); err != nil || ch[1] != MethodPassword {
		t.Errorf("choice %v %v", ch, err)
	}
	return a
}

// guess sends a username and password and returns the status (0: good).
func guess(t *testing.T, a net.Conn, user, pass string) byte {
	t.Helper()
	msg := append([]byte{1, byte(len(user))}, user...)
	a.Write(append(append(msg, byte(len(pass))), pass...))
	var st [2]byte
	if _, err := io.ReadFull(a, st[:]); err != nil {
		t.Error(err)
		return 0xff
	}
	return st[1]
}

// Password guesses from one address, even on parallel connections, get
// their answers no faster than the doubling delays allow: N failures take
// at least the sum of the first N delays (before: 4,500 guesses a second).
// The right password still gets in once the delay has passed.
func TestPasswordGuessesThrottled(t *testing.T) {
	const (
		n     = 10
		base  = 10 * time.Millisecond
		limit = 40 * time.Millisecond
	)
	s := &Server{Backend: &fakeBackend{}, Users: map[string]string{"alice": "s3cret"}, AuthDelay: base, AuthDelayMax: limit, HandshakeTimeout: 10 * time.Second}
	var bound time.Duration
	for i := 0; i < n; i++ {
		bound += min(base<<i, limit)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := offerPassword(t, s)
			defer a.Close()
			if st := guess(t, a, "alice", "guess"); st == 0 {
				t.Error("a wrong password was accepted")
			}
		}()
	}
	wg.Wait()
	if took := time.Since(start); took < bound {
		t.Errorf("%d wrong guesses answered in %v, want at least %v", n, took, bound)
	}
	a := offerPassword(t, s)
	defer a.Close()
	if st := guess(t, a, "alice", "s3cret"); st != 0 {
		t.Errorf("the right password after the guesses: status %d", st)
	}
}

// Beyond MaxPendingAuth authentications under way, a client is refused
// at once (its credentials are not even read).
func TestPendingAuthCap(t *testing.T) {
	s := &Server{Backend: &fakeBackend{}, Users: map[string]string{"alice": "s3cret"}, MaxPendingAuth: 2}
	for i := 0; i < 2; i++ {
		a := offerPassword(t, s) // sends no credentials: stays pending
		defer a.Close()
	}
	// the server takes its place after it sent the method choice
	testwait.Until(t, "two authentications pending", 5*time.Second, func() bool {
		s.auth.init(2) // (synchronizes with the server's init)
		return len(s.auth.pending) == 2
	})
	a := offerPassword(t, s)
	defer a.Close()
	var st [2]byte
	if _, err := io.ReadFull(a, st[:]); err != nil || st != [2]byte{1, 1} {
		t.Errorf("a third pending authentication: %v %v, want refused", st, err)
	}
}

func TestSourceKey(t *testing.T) {
	for _, c := range []struct {
		a    net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 2}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 3}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 4}, "2001:db8:1:2::/64"},
	} {
		if got := sourceKey(c.a); got != c.want {
			t.Errorf("sourceKey(%v) = %s, want %s", c.a, got, c.want)
		}
	}
}
