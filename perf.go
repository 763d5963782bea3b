package gridlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/perf"
)

// Measuring a link's throughput, as iperf3 does (`gridlink perf`): a perf
// server on a node's port, a client that sends to it and reports.

// PerfPort is the perf server's port unless told otherwise.
const PerfPort = perf.Port

// DefaultMaxStreams bounds a link's streams unless told otherwise.
const DefaultMaxStreams = link.DefaultMaxStreams

// Compression is a link's compression (off, s2, zstd, or adaptive per
// block).
type Compression = link.Compression

// ParseCompression reads a compression's name: off, s2, zstd or auto.
func ParseCompression(s string) (Compression, error) { return link.ParseCompression(s) }

// PerfOptions say what a perf client measures (see perf.Options): its
// link options, the data (zero, random, text), for how long, the
// intervals reported.
type (
	PerfOptions  = perf.Options
	PerfResult   = perf.Result
	PerfInterval = perf.Interval
)

// CheckPerfData says whether a perf client can send this kind of data:
// zero, random or text.
func CheckPerfData(kind string) error {
	_, err := perf.NewSource(kind)
	return err
}

// ServePerf answers perf clients on l (a listener of Node.ListenWith,
// which should allow authenticated plain) until ctx is done; logger, if
// set, logs each measurement.
func ServePerf(ctx context.Context, l net.Listener, logger *slog.Logger) error {
	ll, ok := l.(*link.Listener)
	if !ok {
		return fmt.Errorf("gridlink: ServePerf: %T is not a node's listener", l)
	}
	var logf func(string, ...any)
	if logger != nil {
		logf = logfOf(logger)
	}
	return perf.Serve(ctx, ll, logf)
}

// nameWait is how long a dial waits for the hubs to learn a name they do
// not know yet (a server that just started).
const nameWait = 15 * time.Second

// Perf measures the link to the perf server at addr (NODE[:PORT][@HUB],
// port defaulting to port), waiting up to 15 s for the hubs to learn the
// server's name.
func (n *Node) Perf(ctx context.Context, addr string, port int, o PerfOptions) (PerfResult, error) {
	addr = AddrWithPort(addr, port)
	deadline := time.Now().Add(nameWait)
	for {
		dctx, cancel := context.WithTimeout(ctx, nameWait)
		start := time.Now()
		c, err := link.Dial(dctx, n.n, addr, o.Link)
		cancel()
		if err == nil {
			return perf.Run(c, o, time.Since(start))
		}
		if !errors.Is(err, hub.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return perf.Result{Addr: addr}, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// AddrWithPort is addr (NODE[:PORT][@HUB]) with port if it names none.
func AddrWithPort(addr string, port int) string {
	host := addr
	if i := strings.IndexByte(host, '@'); i >= 0 {
		host = host[:i]
	}
	if strings.Contains(host, ":") {
		return addr
	}
	return strings.Replace(addr, host, host+":"+strconv.Itoa(port), 1)
}
