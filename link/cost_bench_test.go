package link

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

// BenchmarkRoutedCost (issue 37) moves 256 MiB per round over one stream
// on loopback in four ways in the same rounds, each once per round in a
// random order: plain TCP, Go's raw TLS 1.3, a direct link with TLS, and
// a link routed through one hub with end-to-end TLS. Sender, hub and
// receiver all run in this process, so the process's CPU time (user+sys,
// getrusage) over a transfer is what the whole path cost. It reports,
// as medians over 5 rounds after a warm-up: each way's rate (MB/s), its
// CPU seconds per GiB moved, and its rate's ratio to plain TCP's.
// WAYS=tcp,routed-tls runs only those (plain TCP first if at all).
func BenchmarkRoutedCost(b *testing.B) {
	const size, rounds = 256 << 20, 5
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer tcpLn.Close()
	sinkAll(b, tcpLn)
	tlsCfg := selfSigned(b)
	tlsLn := tls.NewListener(must(net.Listen("tcp", "127.0.0.1:0")), tlsCfg)
	defer tlsLn.Close()
	sinkAll(b, tlsLn)
	dialers := map[string]func() net.Conn{
		"tcp": func() net.Conn { return must(net.Dial("tcp", tcpLn.Addr().String())) },
		"rawtls": func() net.Conn {
			return must(tls.Dial("tcp", tlsLn.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}))
		},
	}
	for _, m := range []vconn.Method{vconn.Direct, vconn.Routed} {
		a, bn := site(b, m)
		l, err := Listen(bn, 9, ListenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		sinkAll(b, l)
		dialers[string(m)+"-tls"] = func() net.Conn {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return must(Dial(ctx, a, "b:9", Options{}))
		}
	}
	names := []string{"tcp", "rawtls", "direct-tls", "routed-tls"}
	if only := os.Getenv("WAYS"); only != "" { // e.g. WAYS=tcp,routed-tls to profile one way
		names = strings.Split(only, ",")
	}
	buf := make([]byte, 256<<10)
	for range b.N {
		rate, cpu, ratio := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for r := range rounds + 1 {
			took := map[string]time.Duration{}
			for _, i := range mrand.Perm(len(names)) {
				name := names[i]
				c := dialers[name]()
				u0 := cpuTime()
				took[name] = pushAll(b, c, buf, size)
				if r > 0 {
					cpu[name] = append(cpu[name], (cpuTime()-u0).Seconds()*float64(1<<30)/size)
					rate[name] = append(rate[name], size/took[name].Seconds()/1e6)
				}
			}
			if r > 0 {
				for _, n := range names[1:] {
					if took["tcp"] == 0 {
						break
					}
					ratio[n] = append(ratio[n], took["tcp"].Seconds()/took[n].Seconds())
				}
			}
		}
		med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
		for _, n := range names {
			b.ReportMetric(med(rate[n]), n+"-MB/s")
			b.ReportMetric(med(cpu[n]), n+"-cpus/GiB")
			if len(ratio[n]) > 0 {
				b.ReportMetric(med(ratio[n]), n+"-ratio")
			}
		}
	}
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// selfSigned is a TLS 1.3 server configuration with a fresh P-256 key.
func selfSigned(b *testing.B) *tls.Config {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}
}
