package pki_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// BenchmarkHandshakeAdmission times a whole gridlink handshake (TLS 1.3,
// both verdicts) over loopback TCP: an open grid's (self-signed
// certificates, keys proved and nothing else) against a CA-admitted one
// (node certificates, each end validating the other's chain and the
// revocation list) and a user's proxy dialling a node, alternating in the
// same run. It reports microseconds per handshake and the ratios to open:
// the CPU that admission adds to every connection setup, with no network
// delay in the way (bench/security.sh measures it in the lab).
func BenchmarkHandshakeAdmission(b *testing.B) {
	key := func() identity.Key {
		k, err := identity.NewKey()
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	open := func() *pki.Credentials {
		c, err := pki.NewCredentials(key())
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	g := pkitest.New(b, "bench")
	modes := []struct {
		name     string
		cli, srv *pki.Credentials
	}{
		{"open", open(), open()},
		{"ca", g.Member(b, ca.Node, "client"), g.Member(b, ca.Node, "server")},
		{"proxy", g.Proxy(b, g.User(b, "alice", "physics"), proxy.Options{}), g.Member(b, ca.Node, "server")},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	handshake := func(cli, srv *pki.Credentials) {
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		done := make(chan error, 1)
		go func() {
			c, err := srv.Server(context.Background(), s, nil)
			if err == nil {
				err = c.Verdict()
			}
			done <- err
		}()
		c, err := cli.Client(context.Background(), a, srv.Key.ID(), nil)
		if err == nil {
			err = c.Verdict()
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	const rounds = 50 // handshakes per mode per iteration, modes alternating
	spent := make([]time.Duration, len(modes))
	for range b.N {
		for i, m := range modes {
			start := time.Now()
			for range rounds {
				handshake(m.cli, m.srv)
			}
			spent[i] += time.Since(start)
		}
	}
	per := func(i int) float64 { return float64(spent[i].Microseconds()) / float64(b.N*rounds) }
	for i, m := range modes {
		b.ReportMetric(per(i), m.name+"-µs/handshake")
		if i > 0 {
			b.ReportMetric(per(i)/per(0), m.name+"/open")
		}
	}
}
