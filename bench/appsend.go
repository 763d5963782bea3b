//go:build ignore

// appsend sends N MiB to a sink and prints the rate, for bench/apps.sh:
// the same sender whichever way it reaches the sink, so that only the way
// differs.
//
//	go run bench/appsend.go api HUB NODE:PORT MIB     the gridlink Go API (its own node)
//	go run bench/appsend.go tcp HOST:PORT MIB         plain TCP (to gridlink forward)
//	go run bench/appsend.go socks PROXY HOST:PORT MIB SOCKS5 CONNECT by name (to gridlink socks)
//
// The rate counts from the first byte written until the sink closes its
// end after reading everything (after the sender's half-close), so bytes
// still in buffers are not counted as delivered. It prints one line:
// "MBIT RATE BYTES SECONDS".
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/gridlink/gridlink"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "appsend:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: api HUB ADDR MIB | tcp ADDR MIB | socks PROXY ADDR MIB")
	}
	mib, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
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
	buf := make([]byte, 256<<10)
	total := int64(mib) << 20
	start := time.Now()
	for left := total; left > 0; left -= int64(len(buf)) {
		if _, err := c.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			return err
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("%.1f %d %.3f\n", float64(total)*8/secs/1e6, total, secs)
	return nil
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
