package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
)

func perfCmd() *cobra.Command {
	var nf nodeFlags
	var serve, asJSON bool
	var port, maxStreams int
	var streams, compress, encrypt, data string
	var seconds, omit, interval float64
	var resume time.Duration
	var upgrade bool
	c := &cobra.Command{
		Use:   "perf NODE[:PORT] | perf --serve",
		Short: "measure a link's throughput, as iperf3 does: parallel streams, compression, encryption",
		Long: `perf runs its own node. With --serve it answers perf clients on a port
(5201 unless --port says otherwise), allowing authenticated-plain links.
Without it, it sends data to NODE's perf server for --time seconds and
reports the rate per interval and overall, as the server counted it.`,
		Example: `  gridlink perf --serve --name b --hub 198.51.100.10:7946
  gridlink perf b --hub 198.51.100.10:7946 --streams auto
  gridlink perf b --hub 198.51.100.10:7946 --data text --compress auto --json
  gridlink perf b --hub 198.51.100.10:7946 --encrypt off -t 5`,
		Args: func(cmd *cobra.Command, args []string) error {
			if serve {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want 1-65535", port)
			}
			var o gridlink.PerfOptions
			var err error
			if !serve {
				if o, err = perfOptions(streams, maxStreams, compress, encrypt, data, seconds, omit, interval); err != nil {
					return err
				}
				resumeOptions(&o.Link, resume)
				o.Link.Upgrade = upgrade
			}
			cfg, err := nf.apiConfig("gridlink perf")
			if err != nil {
				return err
			}
			start := gridlink.StartAttached
			if serve {
				start = gridlink.Start
			}
			node, err := start(ctx, cfg)
			if err != nil {
				return flagWords(err)
			}
			defer node.Close()
			if serve {
				ctx, refused := hold(ctx, "gridlink perf", node, nf.verbose)
				lo := gridlink.ListenOptions{AllowPlain: true, MaxStreams: maxStreams, NoResume: resume <= 0}
				lo.Config.ResumeTimeout = max(resume, 0)
				l, err := node.ListenWith(strconv.Itoa(port), lo)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "gridlink perf: %s listening on %s\n", node.Name(), l.Addr())
				err = gridlink.ServePerf(ctx, l, logger())
				if rerr := refused(); rerr != nil {
					return rerr
				}
				return err
			}
			if !asJSON {
				o.Report = func(iv gridlink.PerfInterval) {
					fmt.Printf("%6.1f s  %9.1f Mbit/s  %3d streams\n", iv.T, iv.Mbps, iv.Streams)
				}
			}
			res, err := node.Perf(ctx, args[0], port, o)
			if asJSON {
				if err != nil {
					res.Error = err.Error()
				}
				if jerr := json.NewEncoder(os.Stdout).Encode(res); jerr != nil {
					return jerr
				}
				return err
			}
			if err != nil {
				return err
			}
			fmt.Printf("%s (%s, %d streams, compression %s, encrypt %v, %s data): %.1f Mbit/s over %.2f s",
				res.Addr, res.Method, res.Streams, res.Compress, res.Encrypt, res.Data, res.Mbps, res.Seconds)
			if o.Omit > 0 {
				fmt.Printf(", %.1f Mbit/s after the first %.1f s (as the %s counts)", res.SteadyMbps, o.Omit.Seconds(), res.SteadyFrom)
			}
			if res.WireBytes != res.Bytes {
				fmt.Printf("; on the wire %.1f Mbit/s (%.2fx compression)", res.WireMbps, float64(res.Bytes)/float64(res.WireBytes))
			}
			fmt.Println()
			return nil
		},
	}
	nf.add(c, fmt.Sprintf("perf-%s-%d", hostname(), os.Getpid()))
	f := c.Flags()
	f.BoolVar(&serve, "serve", false, "answer perf clients")
	f.IntVarP(&port, "port", "p", gridlink.PerfPort, "virtual port of the perf server")
	f.StringVarP(&streams, "streams", "P", "1", "parallel streams: a number, or auto (grow while throughput grows)")
	f.IntVar(&maxStreams, "max-streams", gridlink.DefaultMaxStreams, "the most streams of a link")
	f.StringVar(&compress, "compress", "off", "compression: off, s2, zstd or auto (adaptive, per block)")
	f.StringVar(&encrypt, "encrypt", "on", "on: TLS 1.3; off: authenticated plain (the handshake proves both ends, then data travels in the clear)")
	f.StringVar(&data, "data", "zero", "what to send: zero, random (incompressible) or text (log-like)")
	f.Float64VarP(&seconds, "time", "t", 10, "seconds to send")
	f.Float64VarP(&omit, "omit", "O", 0, "seconds left out of the steady rate (ramp-up)")
	f.Float64VarP(&interval, "interval", "i", 1, "seconds between interval reports")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	addUpgradeFlag(c, &upgrade)
	c.Flags().DurationVar(&resume, "resume-timeout", gridlink.DefaultResumeTimeout, resumeUsage+"; with --serve, the longest a client's link may wait")
	return c
}

func perfOptions(streams string, maxStreams int, compress, encrypt, data string, seconds, omit, interval float64) (gridlink.PerfOptions, error) {
	o := gridlink.PerfOptions{Data: data, Duration: secs(seconds), Omit: secs(omit), Interval: secs(interval)}
	switch {
	case streams == "auto":
		o.Link.Streams = gridlink.AutoStreams
	default:
		n, err := strconv.Atoi(streams)
		if err != nil || n < 1 {
			return o, fmt.Errorf("--streams %q: want a number from 1 or auto", streams)
		}
		o.Link.Streams = n
	}
	o.Link.MaxStreams = maxStreams
	var err error
	if o.Link.Compression, err = gridlink.ParseCompression(compress); err != nil {
		return o, fmt.Errorf("--compress: %w", err)
	}
	switch encrypt {
	case "on":
	case "off":
		o.Link.Plain = true
	default:
		return o, fmt.Errorf("--encrypt %q: want on or off", encrypt)
	}
	if err := gridlink.CheckPerfData(data); err != nil {
		return o, fmt.Errorf("--data: %w", err)
	}
	if seconds <= 0 || omit < 0 || omit >= seconds || interval <= 0 {
		return o, fmt.Errorf("--time %g --omit %g --interval %g: want time > omit >= 0 and interval > 0", seconds, omit, interval)
	}
	return o, nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
