//go:build ignore

// appsend is both ends of bench/apps.sh: a sender of N MiB that is the
// same program whichever way it reaches the sink, so that only the way
// differs, and the sink that times every way the same way.
//
//	go run bench/appsend.go api HUB NODE:PORT MIB     the gridlink Go API (its own node)
//	go run bench/appsend.go tcp HOST:PORT MIB         plain TCP (to gridlink forward)
//	go run bench/appsend.go socks PROXY HOST:PORT MIB SOCKS5 CONNECT by name (to gridlink socks)
//	go run bench/appsend.go pipe MIB                  to stdout (into gridlink nc)
//	go run bench/appsend.go sink HOST:PORT            the sink
//
// Senders write in 256 KiB writes; the network ways half-close, wait
// until the sink closes its end after reading everything, and print
// "MBIT BYTES SECONDS" timed from their first write, which includes
// whatever the way does before its bytes move (the socks and forward
// ways set their link up meanwhile, the api way before).
//
// The sink accepts TCP connections and reads each until EOF, then closes
// it; for each it prints one line "MBIT BYTES SECONDS", timed from the
// first byte it read to the last. That is the figure apps.sh compares:
// it leaves out process start-up and link setup, the same way for every
// way, and counts only bytes that crossed the whole path.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gridlink/gridlink"
)

// chunk is the size of every write of the senders and of the sink's reads.
const chunk = 256 << 10

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "appsend:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 2 && args[0] == "sink" {
		return sink(args[1])
	}
	if len(args) < 2 {
		return fmt.Errorf("usage: api HUB ADDR MIB | tcp ADDR MIB | socks PROXY ADDR MIB | pipe MIB | sink ADDR")
	}
	mib, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
		return err
	}
	total := int64(mib) << 20
	if args[0] == "pipe" {
		_, err := send(os.Stdout, total)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var c net.Conn
	switch args[0] {
	case "api":
		n, err := gridlink.Start(ctx, gridlink.Config{Name: fmt.Sprintf("appsend-%d", os.Getpid()), Hubs: []string{args[1]}})
		if err != nil {
			return err
		}
		defer n.Close()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if c, err = n.Dial(ctx, args[2]); err == nil || time.Now().After(deadline) {
				break
			}
		}
	case "tcp":
		c, err = net.Dial("tcp", args[1])
	case "socks":
		c, err = socksDial(args[1], args[2])
	default:
		return fmt.Errorf("unknown way %q", args[0])
	}
	if err != nil {
		return err
	}
	defer c.Close()
	start, err := send(c, total)
	if err != nil {
		return err
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return err
	}
	report(total, time.Since(start))
	return nil
}

// send writes total zero bytes to w in chunks and returns when it began.
func send(w io.Writer, total int64) (time.Time, error) {
	buf := make([]byte, chunk)
	start := time.Now()
	for left := total; left > 0; left -= chunk {
		if _, err := w.Write(buf[:min(chunk, left)]); err != nil {
			return start, err
		}
	}
	return start, nil
}

func report(n int64, d time.Duration) {
	fmt.Printf("%.1f %d %.3f\n", float64(n)*8/d.Seconds()/1e6, n, d.Seconds())
}

// sink serves connections on addr until it is killed: each is read to
// EOF, reported, then closed.
func sink(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var mu sync.Mutex // one report line at a time
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, chunk)
			var n int64
			var first, last time.Time
			for {
				k, err := c.Read(buf)
				if k > 0 {
					last = time.Now()
					if n == 0 {
						first = last
					}
					n += int64(k)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "appsend: sink:", err)
					return
				}
			}
			mu.Lock()
			report(n, last.Sub(first))
			mu.Unlock()
		}()
	}
}

// socksDial connects through a SOCKS5 proxy (no authentication), the
// name resolved by the proxy.
func socksDial(proxy, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, _ := strconv.Atoi(port)
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	req := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(p))
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	rep := make([]byte, 2+10)
	if _, err := io.ReadFull(c, rep); err != nil || rep[1] != 0 || rep[3] != 0 {
		c.Close()
		return nil, fmt.Errorf("socks: reply %v %v", rep, err)
	}
	return c, nil
}
