package hubserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// helperEnv makes the test binary run a lone hub (for an honest RSS
// figure): it prints "addr ADDR", then answers each "stats" line on stdin
// with "nodes=N rss_kib=R heap=H goroutines=G", and exits at EOF.
const helperEnv = "GRIDLINK_HUB_HELPER"

func runHelper() {
	key, err := identity.NewKey()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cr, _ := pki.NewCredentials(key)
	h, err := New(Config{Name: "rss", Creds: cr, Listen: "127.0.0.1:0", Logf: func(string, ...any) {}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go h.Serve(ctx)
	fmt.Printf("addr %s\n", h.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "stats" {
			continue
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("nodes=%d rss_kib=%d heap=%d goroutines=%d\n", len(h.Nodes()), rssKiB(os.Getpid()), ms.HeapAlloc, runtime.NumGoroutine())
	}
	cancel()
	os.Exit(0)
}

// rssKiB reads a process's resident set size.
func rssKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}
