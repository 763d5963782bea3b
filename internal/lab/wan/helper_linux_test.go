package wan

// Traffic helpers: this test binary, re-executed inside a namespace with
// GLT_WAN_HELPER set, becomes one of these instead of running tests. Each
// prints "ready" once it is set up, then one result line.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const helperEnv = "GLT_WAN_HELPER"

func runHelper(args []string) int {
	// Whatever happens to the test that started it, a helper stops by
	// itself.
	time.AfterFunc(5*time.Minute, func() {
		fmt.Fprintf(os.Stderr, "helper %v: lifetime exceeded\n", args)
		os.Exit(3)
	})
	var err error
	switch args[0] {
	case "sink":
		err = helperSink(args[1], mustDuration(args[2]))
	case "send":
		err = helperSend(args[1], mustDuration(args[2]), mustInt(args[3]))
	case "echo":
		err = helperEcho(args[1])
	case "udpsend":
		err = helperUDPSend(args[1], mustInt(args[2]))
	case "udpblast":
		err = helperUDPBlast(args[1], mustInt(args[2]), mustDuration(args[3]), mustInt(args[4]))
	case "udpcount":
		err = helperUDPCount(args[1], mustDuration(args[2]))
	case "ping":
		err = helperPing(args[1], mustInt(args[2]), mustDuration(args[3]), mustDuration(args[4]))
	default:
		err = fmt.Errorf("unknown helper %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %v: %v\n", args, err)
		return 1
	}
	return 0
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func mustInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// helperSink accepts one TCP connection and reads it to EOF. It reports
// the goodput after the first warmup of the transfer (to leave slow start
// out) as "bps=<bits/s> bytes=<total>".
func helperSink(addr string, warmup time.Duration) error {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("ready")
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	var total, atWarm int64
	var first, warm time.Time
	for {
		n, err := c.Read(buf)
		if n > 0 {
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			if warm.IsZero() && now.Sub(first) >= warmup {
				warm, atWarm = now, total
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	end := time.Now()
	if warm.IsZero() {
		return fmt.Errorf("transfer of %d bytes ended within the %v warm-up", total, warmup)
	}
	bps := float64(total-atWarm) * 8 / end.Sub(warm).Seconds()
	fmt.Printf("bps=%.0f bytes=%d\n", bps, total)
	return nil
}

// helperSend connects to a sink and sends for d, with kernel pacing at
// rate bits/s if rate > 0. It reports "bytes=<n>".
func helperSend(addr string, d time.Duration, rate int64) error {
	fmt.Println("ready")
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if rate > 0 {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, int(rate/8))
		})
		if serr != nil {
			return fmt.Errorf("SO_MAX_PACING_RATE: %w", serr)
		}
	}
	buf := make([]byte, 128<<10)
	var total int64
	deadline := time.Now().Add(d)
	c.SetWriteDeadline(deadline)
	for time.Now().Before(deadline) {
		n, err := c.Write(buf)
		total += int64(n)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			return err
		}
	}
	fmt.Printf("bytes=%d\n", total)
	return nil
}

// helperEcho echoes UDP datagrams until killed.
func helperEcho(addr string) error {
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		c.WriteTo(buf[:n], from)
	}
}

// helperPing sends count UDP probes to an echo helper, one every interval
// whatever comes back, and reports "rtt=<ns>,<ns>,... lost=<n>" with the
// round-trip times in probe order; a probe whose reply has not come
// timeout after it was sent is lost.
func helperPing(addr string, count int64, interval, timeout time.Duration) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("ready")
	sent := make([]time.Time, count)
	rtts := make([]time.Duration, count)
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		reply := make([]byte, 2048)
		for {
			n, err := c.Read(reply)
			now := time.Now()
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // the echo's port was closed for a moment
			}
			if err != nil {
				done <- err
				return
			}
			if n < 8 {
				continue
			}
			mu.Lock()
			if seq := binary.BigEndian.Uint64(reply); seq < uint64(count) && rtts[seq] == 0 && now.Sub(sent[seq]) <= timeout {
				rtts[seq] = now.Sub(sent[seq])
			}
			mu.Unlock()
		}
	}()
	probe := make([]byte, 64)
	next := time.Now()
	for seq := range count {
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		binary.BigEndian.PutUint64(probe, uint64(seq))
		mu.Lock()
		sent[seq] = time.Now()
		mu.Unlock()
		if _, err := c.Write(probe); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
	}
	time.Sleep(timeout)
	c.SetReadDeadline(time.Now())
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	var out []string
	lost := 0
	for _, r := range rtts {
		if r == 0 {
			lost++
			continue
		}
		out = append(out, strconv.FormatInt(int64(r), 10))
	}
	fmt.Printf("rtt=%s lost=%d\n", strings.Join(out, ","), lost)
	return nil
}

// helperUDPSend sends count small datagrams to addr, 1 ms apart, without
// waiting for anything, and reports "sent=<n>".
func helperUDPSend(addr string, count int64) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("ready")
	sent := 0
	for range count {
		if _, err := c.Write(make([]byte, 32)); err == nil {
			sent++
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("sent=%d\n", sent)
	return nil
}

// udpIPOverhead is what IPv4 and UDP headers add to a datagram's payload.
const udpIPOverhead = 28

// helperUDPBlast sends size-byte datagrams to addr at rate bits/s (IP
// bytes) for d, and reports "sent=<n>".
func helperUDPBlast(addr string, rate int64, d time.Duration, size int64) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("ready")
	buf := make([]byte, size)
	gap := time.Duration(float64(size+udpIPOverhead) * 8 / float64(rate) * 1e9)
	start := time.Now()
	sent := 0
	for next := start; time.Since(start) < d; next = next.Add(gap) {
		if w := time.Until(next); w > 200*time.Microsecond {
			time.Sleep(w)
		}
		binary.BigEndian.PutUint64(buf, uint64(sent))
		if _, err := c.Write(buf); err == nil {
			sent++
		}
	}
	fmt.Printf("sent=%d\n", sent)
	return nil
}

// helperUDPCount counts datagrams arriving at addr until none has come
// for idle, and reports "pkts=<n> bytes=<IP bytes after the first> span=<ns
// from first to last arrival>".
func helperUDPCount(addr string, idle time.Duration) error {
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if uc, ok := c.(*net.UDPConn); ok {
		uc.SetReadBuffer(8 << 20)
	}
	fmt.Println("ready")
	buf := make([]byte, 65536)
	var pkts, bytes int64
	var first, last time.Time
	for {
		if !first.IsZero() {
			c.SetReadDeadline(time.Now().Add(idle))
		}
		n, _, err := c.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return err
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		} else {
			bytes += int64(n) + udpIPOverhead
		}
		last = now
		pkts++
	}
	fmt.Printf("pkts=%d bytes=%d span=%d\n", pkts, bytes, last.Sub(first))
	return nil
}
