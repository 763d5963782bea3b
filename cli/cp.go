package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
)

func serveCmd() *cobra.Command {
	var nf nodeFlags
	var root string
	var port, maxStreams int
	var allowPlain bool
	var allowNames, allowGroups []string
	var quota, userQuota, metricsAddr string
	var resume time.Duration
	c := &cobra.Command{
		Use:   "serve [--root DIR]",
		Short: "run a transfer service for gridlink cp, publishing DIR under this node's name",
		Long: `serve runs its own node and answers gridlink cp on a port (2811 unless
--port says otherwise): copies to and from DIR (the working directory by
default; no path may leave it), and pushes from DIR to another service
(third-party transfers, which this service dials itself).

Every client the service admits may read every file below DIR and
overwrite any of them, with the service's rights: DIR has no per-user
permissions. Without --allow or --allow-group that is every member of
the grid (in an open grid, without --ca, every node that reaches its
hubs): serve only what all of them may change, or admit only some
(--allow, --allow-group; they need a grid CA). Names with control
characters are neither stored nor sent.

--quota bounds the bytes of file data DIR holds, what was there before
included (measured at start, logged with the time it took; a replaced
file counts its new size less the old). --user-quota bounds the bytes each
user's copies add (the subject a client's certificate proves, or a
proxy's user; in an open grid, each client's node key), kept across
restarts in DIR/.gridlink-quota (mode 0600, never served or written for
clients; a corrupt one stops serve from starting, a missing one starts
every count at zero; DIR must be writable by the service). A copy that
would exceed one is refused before its data flows, or at the file that
exceeds it, in words on both ends. Whatever the quotas, a copy larger than
the free space of the file system it writes to (less 1% of it, at most
64 MiB) is refused too, and one that finds it full stops, naming it.`,
		Example: `  gridlink serve --name das3v-data --hub 198.51.100.10:7946 --root /data
  gridlink cp -r results das3v-data:runs/42   # elsewhere`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want 1-65535", port)
			}
			cfg, err := nf.apiConfig("gridlink serve")
			if err != nil {
				return err
			}
			node, err := gridlink.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer node.Close()
			ctx, refused := hold(ctx, "gridlink serve", node, nf.verbose)
			q, err := parseBytes(quota)
			if err != nil {
				return fmt.Errorf("--quota: %w", err)
			}
			uq, err := parseBytes(userQuota)
			if err != nil {
				return fmt.Errorf("--user-quota: %w", err)
			}
			svc, err := gridlink.ServeTransfers(node, cfg, gridlink.ServeConfig{Root: root, Port: uint16(port), MaxStreams: maxStreams,
				AllowPlain: allowPlain, Allow: allowNames, AllowGroups: allowGroups, Quota: q, UserQuota: uq, Metrics: metricsAddr,
				ResumeTimeout: serverResume(resume), Logf: printf(logger("node", node.Name()))})
			if errors.Is(err, gridlink.ErrAllowWithoutCA) {
				return errors.New("--allow and --allow-group need a grid CA (--ca): an open grid proves keys, not names")
			}
			if err != nil {
				return err
			}
			defer svc.Close()
			fmt.Fprintf(os.Stderr, "gridlink serve: %s serving %s on %s\n", node.Name(), orDefault(root, "."), svc.Addr())
			if a := svc.MetricsAddr(); a != nil {
				fmt.Fprintf(os.Stderr, "gridlink serve: %s: metrics on http://%s/metrics\n", node.Name(), a)
			}
			err = svc.Serve(ctx)
			if rerr := refused(); rerr != nil {
				return rerr
			}
			return err
		},
	}
	nf.add(c, hostname())
	f := c.Flags()
	f.StringVar(&root, "root", "", "the served directory (default: the working directory)")
	f.IntVarP(&port, "port", "p", gridlink.TransferPort, "virtual port of the service")
	f.IntVar(&maxStreams, "max-streams", gridlink.DefaultMaxStreams, "the most streams of a link")
	f.BoolVar(&allowPlain, "allow-plain", false, "allow clients to ask for authenticated-plain links (cp --encrypt off)")
	f.StringArrayVar(&allowNames, "allow", nil, "admit only this subject (a user's, node's or hub's certificate name; repeatable; with --allow-group: either)")
	f.StringArrayVar(&allowGroups, "allow-group", nil, "admit only members of this group (repeatable)")
	f.StringVar(&quota, "quota", "", "the most bytes of file data DIR may hold, what it holds at start included (suffixes K, M, G; default: no bound)")
	f.StringVar(&metricsAddr, "metrics", "", metricsUsage)
	f.DurationVar(&resume, "resume-timeout", gridlink.DefaultResumeTimeout, serveResumeUsage)
	f.StringVar(&userQuota, "user-quota", "", "the most bytes of file data each user's copies may add, counted across restarts in DIR/.gridlink-quota (suffixes K, M, G; default: no bound)")
	return withConfigFile(c)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

type cpFlags struct {
	recursive, resume, asJSON, quiet bool
	streams, compress, encrypt       string
	limit                            string
	maxStreams, port, retries        int
	interval                         float64
	resumeTimeout                    time.Duration
	upgrade                          bool
}

func cpCmd() *cobra.Command {
	var nf nodeFlags
	var cf cpFlags
	c := &cobra.Command{
		Use:   "cp [-r] [-P N|auto] [--compress auto|off|s2|zstd] [--resume] SRC... DST",
		Short: "copy files to, from and between transfer services (gridlink serve), scp-like",
		Long: `cp runs its own node and copies as scp does: NAME:PATH is PATH under the
root of node NAME's transfer service. With --proxy the node has an
identity of its own (a proxy of that proxy, made in memory for the
command), so it runs beside your agent and other copies with the same
proxy; services see you, the proxy's user. Local to remote, remote to local, or
remote to remote: then the data flows from the first service to the other
directly (a third-party transfer) and this end watches.

Where copies go (scp's rules): DST that is an existing directory receives
each source as DST/NAME (a tree as DST/NAME/...); DST that does not exist,
or is a file, becomes the one source's copy (cp -r SRC NEW makes NEW
SRC's copy, not NEW/SRC); several sources need an existing directory.

Files travel in blocks over a link of parallel streams, each block and
file checked end to end; a file is written under a temporary name
(DIR/.NAME.gridlink-part) and renamed once verified, with its mode and
mtime. A dropped connection is resumed automatically. An interrupted
copy (killed, or out of retries) leaves its partial files where they
go, and cp says where; the same command with --resume continues it,
keeping what it stored where the checksums agree. A tree copied to a new
DST is continued in DST, not copied again into DST/NAME: until it
completes, DST holds a mark (.gridlink-unfinished) naming its source. A
copy without --resume follows the rules above (into DST/NAME once DST
exists) and says where the unfinished one is.`,
		Example: `  gridlink cp -r results das3v-data:runs/42 --hub 198.51.100.10:7946
  gridlink cp das3v-data:runs/42/out.h5 . --hub 198.51.100.10:7946 --resume
  gridlink cp das3v-data:runs/42 g5k-data:incoming -r --hub 198.51.100.10:7946`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return runCp(ctx, &nf, cf, args)
		},
	}
	nf.add(c, fmt.Sprintf("cp-%s-%d", hostname(), os.Getpid()))
	f := c.Flags()
	f.BoolVarP(&cf.recursive, "recursive", "r", false, "copy directory trees")
	f.BoolVar(&cf.resume, "resume", false, "keep what an earlier, interrupted copy stored where its checksums agree")
	f.StringVarP(&cf.streams, "streams", "P", "auto", "parallel streams of the link: a number, or auto")
	f.IntVar(&cf.maxStreams, "max-streams", gridlink.DefaultMaxStreams, "the most streams of a link")
	f.StringVar(&cf.compress, "compress", "auto", "compression: auto (adaptive, per block), off, s2 or zstd")
	f.StringVar(&cf.encrypt, "encrypt", "on", "on: TLS 1.3; off: authenticated plain (the service must --allow-plain)")
	f.StringVar(&cf.limit, "limit", "", "bound the file data rate, bytes per second (suffixes K, M, G), whichever end sends")
	f.IntVar(&cf.retries, "retries", 5, "resume this many times after a dropped connection")
	f.IntVar(&cf.port, "port", gridlink.TransferPort, "virtual port of the transfer services")
	f.BoolVar(&cf.asJSON, "json", false, "print a JSON summary")
	f.BoolVarP(&cf.quiet, "quiet", "q", false, "no progress display")
	f.Float64Var(&cf.interval, "interval", 2, "seconds between progress lines when stderr is not a terminal")
	addResumeFlag(c, &cf.resumeTimeout)
	addUpgradeFlag(c, &cf.upgrade)
	return c
}

func runCp(ctx context.Context, nf *nodeFlags, cf cpFlags, args []string) error {
	plan, err := gridlink.PlanCopy(args[:len(args)-1], args[len(args)-1])
	if err != nil {
		return err
	}
	lo, err := cpLinkOptions(cf)
	if err != nil {
		return err
	}
	limit, err := parseBytes(cf.limit)
	if err != nil {
		return fmt.Errorf("--limit: %w", err)
	}
	cfg, err := nf.apiConfig("gridlink cp")
	if err != nil {
		return err
	}
	retries := cf.retries
	if retries == 0 {
		retries = -1
	}
	resumeTimeout := cf.resumeTimeout
	if resumeTimeout <= 0 {
		resumeTimeout = -1
	}
	bar := newProgress(os.Stderr, secs(cf.interval), cf.quiet)
	res, err := gridlink.Copy(ctx, gridlink.CopyConfig{Node: cfg, ProxyFile: nf.sec.proxyFile, Port: cf.port, Link: lo, ResumeTimeout: resumeTimeout,
		Recursive: cf.recursive, Resume: cf.resume, Retries: retries, Limit: limit, Progress: bar.event,
		Logf: func(f string, a ...any) { bar.log(fmt.Sprintf(f, a...)) }}, plan)
	bar.stop()
	if errors.Is(err, gridlink.ErrNoDelegator) { // a third-party transfer: the source may act for us
		return errors.New("a third-party transfer in a grid with a CA runs as a user, whom the source acts for: give --proxy (from gridlink proxy init); a node's certificate cannot delegate")
	}
	if res.Interrupted {
		fmt.Fprintf(os.Stderr, "gridlink cp: interrupted: what was stored stays at %s (partial files named .NAME.gridlink-part); the same command with --resume continues it\n", args[len(args)-1])
	}
	return cpReport(res, err, cf.asJSON, cf.quiet)
}

// cpReport prints the summary: JSON, or a line (and the errors, unless the
// progress display printed them as they came).
func cpReport(res gridlink.CopyResult, err error, asJSON, quiet bool) error {
	sum := res.CopySummary
	if asJSON {
		r := gridlink.CopyReport(res, err)
		if jerr := json.NewEncoder(os.Stdout).Encode(r); jerr != nil {
			return jerr
		}
		return err
	}
	for _, e := range sum.Errors {
		if quiet {
			fmt.Fprintf(os.Stderr, "gridlink cp: %s\n", e.Error)
		}
	}
	if sum.Attempts > 0 && (sum.Files > 0 || sum.Dirs > 0) {
		fmt.Fprintf(os.Stderr, "%d files (%s) in %.2f s, %.1f Mbit/s; %s sent, %s kept; %d attempt(s)\n", sum.Files, size(sum.Bytes),
			sum.Seconds, sum.Mbps, size(sum.Sent), size(sum.Kept), sum.Attempts)
	}
	return err
}

func cpLinkOptions(cf cpFlags) (gridlink.LinkOptions, error) {
	o := gridlink.LinkOptions{MaxStreams: cf.maxStreams, Upgrade: cf.upgrade}
	if cf.streams == "auto" {
		o.Streams = gridlink.AutoStreams
	} else if n, err := strconv.Atoi(cf.streams); err == nil && n >= 1 {
		o.Streams = n
	} else {
		return o, fmt.Errorf("--streams %q: want a number from 1 or auto", cf.streams)
	}
	var err error
	if o.Compression, err = gridlink.ParseCompression(cf.compress); err != nil {
		return o, fmt.Errorf("--compress: %w", err)
	}
	switch cf.encrypt {
	case "on":
	case "off":
		o.Plain = true
	default:
		return o, fmt.Errorf("--encrypt %q: want on or off", cf.encrypt)
	}
	return o, nil
}

// parseBytes reads a byte count with an optional K, M or G suffix
// (powers of 1024); "" is 0.
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	m := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		m = 1 << 10
	case "M":
		m = 1 << 20
	case "G":
		m = 1 << 30
	}
	if m > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a number of bytes, with K, M or G", s)
	}
	return int64(n * float64(m)), nil
}
