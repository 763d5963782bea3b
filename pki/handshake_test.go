package pki

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
)

func creds(t *testing.T, seed byte) *Credentials {
	t.Helper()
	s := make([]byte, 32)
	s[0] = seed
	c, err := NewCredentials(identity.KeyFromSeed(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type result struct {
	id  identity.ID
	err error
}

func handshake(t *testing.T, cli, srv *Credentials, want identity.ID, accept func(Peer) error) (client, server result) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan result)
	go func() {
		c, err := srv.Server(ctx, b, accept)
		if err != nil {
			done <- result{err: err}
			return
		}
		// The client's verdict, then its data ("ok") or EOF.
		buf := make([]byte, 2)
		_, err = io.ReadFull(c, buf)
		done <- result{c.Peer.ID, err}
	}()
	c, err := cli.Client(ctx, a, want, nil)
	if err != nil {
		a.Close()
		return result{err: err}, <-done
	}
	if _, err := c.Write([]byte("ok")); err != nil {
		return result{c.Peer.ID, err}, <-done
	}
	// The server's verdict: a refusal shows here.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	return result{c.Peer.ID, err}, <-done
}

func TestHandshake(t *testing.T) {
	alice, bob, carol := creds(t, 1), creds(t, 2), creds(t, 3)
	c, s := handshake(t, alice, bob, bob.Key.ID(), nil)
	if c.err != nil || s.err != nil || c.id != bob.Key.ID() || s.id != alice.Key.ID() {
		t.Fatalf("good handshake: client %v %s, server %v %s", c.err, c.id.Short(), s.err, s.id.Short())
	}
	// alice meant carol but reached bob: the identity check.
	c, _ = handshake(t, alice, bob, carol.Key.ID(), nil)
	var pe *PeerError
	if !errors.As(c.err, &pe) || !errors.Is(c.err, ErrWrongPeer) || pe.Got != bob.Key.ID() || pe.Want != carol.Key.ID() {
		t.Fatalf("wrong machine: %v", c.err)
	}
	if !strings.Contains(c.err.Error(), "reached the wrong machine: expected "+carol.Key.ID().Short()) {
		t.Errorf("message %q", c.err)
	}
	// bob refuses alice: both ends say why.
	c, s = handshake(t, alice, bob, identity.ID{}, func(Peer) error { return errors.New("not a member") })
	if !errors.Is(s.err, ErrDenied) || !strings.Contains(s.err.Error(), "not a member") {
		t.Errorf("refusal, server: %v", s.err)
	}
	var de *DeniedError
	if !errors.As(c.err, &de) || !de.ByPeer || de.Reason != "not a member" {
		t.Errorf("refusal, client: %v", c.err)
	}
}

func FuzzPeerID(f *testing.F) {
	c, _ := NewCredentials(identity.KeyFromSeed(make([]byte, 32)))
	f.Add(c.Certificate().Certificate[0])
	f.Fuzz(func(t *testing.T, der []byte) {
		id, err := peerID([][]byte{der})
		if err == nil && id.IsZero() {
			t.Fatal("accepted a certificate with a zero ID")
		}
	})
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}
