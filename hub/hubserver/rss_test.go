package hubserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// helperEnv makes the test binary run a lone hub (for an honest RSS
// figure): it prints "addr ADDR", then answers each "stats" line on stdin
// with "nodes=N rss_kib=R heap=H stack=S goroutines=G" (after a GC: heap
// the live heap's bytes, stack the goroutine stacks' bytes), writes a heap
// profile to PATH on "heapprofile PATH" (answering "ok"), and exits at
// EOF.
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
		if path, ok := strings.CutPrefix(in.Text(), "heapprofile "); ok {
			runtime.GC()
			if f, err := os.Create(path); err == nil {
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
			fmt.Println("ok")
			continue
		}
		if in.Text() != "stats" {
			continue
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("nodes=%d rss_kib=%d heap=%d stack=%d goroutines=%d\n", len(h.Nodes()), rssKiB(os.Getpid()), ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine())
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
