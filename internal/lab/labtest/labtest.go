// Package labtest brings gridlab topologies up for Go tests and offers
// sockets inside lab hosts. It owns the rules every lab test follows: lab
// tests need root, and under CI=true they fail instead of skipping; one
// lab at a time across all test processes (a file lock); the lab is torn
// down when the test ends, leaving nothing behind.
//
// A test package that brings labs up must route its TestMain through Main,
// so that the test binary can also serve as the lab's link emulator.
package labtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Main runs the tests, or the link emulator when the lab re-executes the
// test binary for it.
func Main(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == lab.EmulateCmd && os.Args[2] == "--state" {
		if err := lab.Emulate(os.Args[3], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "emulate:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// RequireRoot skips the test without root, or fails it under CI=true.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("lab tests need root, and CI must run them")
	}
	t.Skip("lab tests need root")
}

// Up brings up the named topology for the rest of the test and returns it.
func Up(t testing.TB, name string, params map[string]string) *topology.Topology {
	t.Helper()
	RequireRoot(t)
	if err := os.MkdirAll(lab.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(lab.StateDir, "test.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	topo, src, err := lab.Load(name, params)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lab.Up(topo, src, lab.Options{Params: params, Executable: exe, Log: testLog{t}, Owner: os.Getpid()}); err != nil {
		f.Close()
		t.Fatalf("lab up %s: %v", name, err)
	}
	t.Logf("lab %s up in %v", name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		defer f.Close()
		if _, err := lab.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return topo
}

type testLog struct{ t testing.TB }

func (l testLog) Write(b []byte) (int, error) { l.t.Log(string(b)); return len(b), nil }

// Host returns the named host of t or fails the test.
func Host(t testing.TB, topo *topology.Topology, name string) *topology.Host {
	t.Helper()
	h, err := topo.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Listen opens a TCP listener in host h on addr (e.g. ":7000": IPv4;
// "[fd00::1]:7000": IPv6) whose every connection is passed to serve in
// its own goroutine. It closes with the test.
func Listen(t testing.TB, h *topology.Host, addr string, serve func(net.Conn)) net.Listener {
	t.Helper()
	network := "tcp4"
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Is6() {
		network = "tcp6"
	}
	var ln net.Listener
	err := netns.Do(lab.HostNS(h), func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s %s: %v", h.ID(), addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return ln
}

// Echo is a serve function that sends back what comes, the end of it as
// a half-close, for at most a minute. (Not socat's PIPE echo: socat
// blocks writing to its own pipe when the pipe cannot take a whole
// buffer, which stalls a fast stream for good, as its manual warns.)
func Echo(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(c, c); err == nil {
		_ = c.(*net.TCPConn).CloseWrite()
	}
}

// Greet is a serve function that writes name and a newline.
func Greet(name string) func(net.Conn) {
	return func(c net.Conn) { _, _ = io.WriteString(c, name+"\n") }
}

// Dial connects from host h to addr within timeout. laddr, if not empty,
// binds the local end (e.g. ":40001").
func Dial(h *topology.Host, addr, laddr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(lab.HostNS(h), func() (err error) {
		d := net.Dialer{Timeout: timeout}
		if laddr != "" {
			if d.LocalAddr, err = net.ResolveTCPAddr("tcp4", laddr); err != nil {
				return err
			}
		}
		c, err = d.DialContext(context.Background(), "tcp4", addr)
		return err
	})
	return c, err
}
