package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/vconn"
)

// A stream to a node that is then revoked: the agent cuts it, and the
// client is told why (the peer is no longer admitted: revoked), not "use
// of closed network connection" or nothing: when it handed its ends to
// the agent (as gridlink nc hands pipes), and when it copies the bytes
// itself (as nc on a terminal: Stream.Conn, then End; as forward and
// socks where the agent cannot take the socket: Stream.Join).
func TestHandedStreamCutByRevocation(t *testing.T) {
	for _, how := range []string{"handed", "copied", "joined"} {
		t.Run(how, func(t *testing.T) { streamCutByRevocation(t, how) })
	}
}

func streamCutByRevocation(t *testing.T, how string) {
	g := pkitest.New(t, "testgrid")
	h, err := hubserver.New(hubserver.Config{Name: "hub", Creds: g.Member(t, ca.Hub, "hub"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go h.Serve(ctx)
	start := func(name string, creds *pki.Credentials) *control.Client {
		sock := fmt.Sprintf("@gridlink-test-%d-%s-%s", os.Getpid(), how, name)
		a, err := Start(ctx, Config{Control: sock, Node: vconn.Config{Name: name, Creds: creds, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return control.Dial(sock)
	}
	alice := start("alice", g.Member(t, ca.Node, "alice"))
	srvCreds := g.Member(t, ca.Node, "srv")
	srv := start("srv", srvCreds)
	exposeEcho(ctx, t, srv, 2222)

	s, err := alice.Open(ctx, control.ConnectRequest{Addr: "srv:2222"})
	if err != nil {
		t.Fatal(err)
	}
	switch how {
	case "handed":
		inR, inW := blockingPipe(t)
		outR, outW := blockingPipe(t)
		defer inW.Close()
		defer outR.Close()
		if err := s.Hand(inR, outW); err != nil {
			t.Fatal(err)
		}
		inR.Close()
		outW.Close()
		inW.Write([]byte("x"))
		if _, err := io.ReadFull(outR, make([]byte, 1)); err != nil {
			t.Fatalf("echo before the revocation: %v", err)
		}
		g.Revoke(t, srvCreds.Certificate().Leaf)
		err = s.Wait()
	case "copied":
		c, cerr := s.Conn()
		if cerr != nil {
			t.Fatal(cerr)
		}
		c.Write([]byte("x"))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("echo before the revocation: %v", err)
		}
		g.Revoke(t, srvCreds.Certificate().Leaf)
		io.Copy(io.Discard, c)
		err = s.End(ctx)
		s.Close()
	case "joined":
		local, far := net.Pipe() // no kernel socket: this process copies
		errc := make(chan error, 1)
		go func() { errc <- s.Join(far) }()
		local.Write([]byte("x"))
		if _, err := io.ReadFull(local, make([]byte, 1)); err != nil {
			t.Fatalf("echo before the revocation: %v", err)
		}
		g.Revoke(t, srvCreds.Certificate().Leaf)
		io.Copy(io.Discard, local)
		local.Close()
		err = <-errc
	}
	var se *control.StreamError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "no longer admitted") || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("the cut stream (%s): %v; want the reason (no longer admitted: revoked)", how, err)
	}
}
