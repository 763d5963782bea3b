package hubserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// BenchmarkRelayPerCore measures what one hub relays per core of CPU: the
// hub runs alone in a child process (the test binary re-executed, as for
// BenchmarkHubRSS), STREAMS pairs of nodes in this process stream through
// it over circuits with end-to-end TLS (as vconn's routed connections
// do), and the hub's CPU time (utime+stime from /proc) during the rounds
// divides the bytes it relayed. Plain loopback TCP, one connection per
// stream, runs in the same rounds, alternating, as the baseline: its
// MB/s is what the kernel moves with both ends in this process.
// GRIDLINK_RELAY_STREAMS sets the streams (default 4).
func BenchmarkRelayPerCore(b *testing.B) {
	const size, rounds = 64 << 20, 4
	streams := 4
	if v, err := strconv.Atoi(os.Getenv("GRIDLINK_RELAY_STREAMS")); err == nil && v > 0 {
		streams = v
	}
	addr, cmd, _ := helperHub(b)
	attach := func(name string) (*hub.Session, *pki.Credentials) {
		cr := creds(b)
		s, err := hub.Attach(context.Background(), hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: name}, Hubs: []string{addr}, Logf: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s, cr
	}
	var routed, plain []net.Conn
	for i := range streams {
		src, srcCreds := attach(fmt.Sprintf("src%d", i))
		dst, dstCreds := attach(fmt.Sprintf("dst%d", i))
		routed = append(routed, routedTLS(b, src, dst, srcCreds, dstCreds, sink(size)))
		plain = append(plain, plainTCP(b, sink(size)))
	}
	push := func(cs []net.Conn) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(cs))
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = pushRound(c, make([]byte, 256<<10), size)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	push(routed) // warm up: windows, slow start
	push(plain)
	var tRouted, tPlain, hubCPU time.Duration
	var perCore []float64
	b.SetBytes(int64(size * streams * rounds))
	b.ResetTimer()
	for range b.N {
		for range rounds {
			tPlain += push(plain)
			c0 := procCPU(b, cmd.Process.Pid)
			d := push(routed)
			c := procCPU(b, cmd.Process.Pid) - c0
			tRouted += d
			hubCPU += c
			perCore = append(perCore, float64(size*streams)/1e6/c.Seconds())
		}
	}
	b.StopTimer()
	sort.Float64s(perCore)
	total := float64(size*streams) * float64(rounds*b.N) / 1e6
	b.ReportMetric(total/tPlain.Seconds(), "plain-MB/s")
	b.ReportMetric(total/tRouted.Seconds(), "routed-MB/s")
	b.ReportMetric(hubCPU.Seconds()/tRouted.Seconds(), "hub-cores")
	b.ReportMetric(total/hubCPU.Seconds(), "relayed-MB/s-per-hub-core")
	b.ReportMetric(perCore[len(perCore)/2], "per-core-median")
	b.ReportMetric(total/hubCPU.Seconds()/(total/tPlain.Seconds()), "per-core/plain")
}

// procCPU is a process's user and system CPU time so far (/proc/PID/stat,
// in clock ticks of 10 ms).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// the fields after the command name (which may hold spaces), from
	// the state on: utime and stime are the 12th and 13th of them
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
