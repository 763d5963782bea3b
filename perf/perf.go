// Package perf measures links between nodes, as iperf3 measures TCP: a
// client sends data of a chosen kind over a link with chosen options for a
// while, the server counts what arrives, and the client reports the rate,
// per interval and overall. It owns the measuring protocol, the data
// sources and the report; the links are package link's, the nodes package
// vconn's, the command line package cli's.
//
// # Protocol
//
// Over a link to the server's port (Port unless told otherwise) the client
// sends any bytes and half-closes; the server reads to EOF, then answers
// with the number of bytes it read as 8 bytes, big-endian, then its
// timeline of what its link received when (timeline.go), and closes. The
// client's rate is that count over the time until the answer, so bytes
// still in buffers are never counted as sent; its steady rate is the
// server's, from the timeline (the client's own count over the same span,
// which also holds what the buffers on the way grew by, is kept beside
// it).
package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gridlink/gridlink/link"
)

// Port is the default virtual port of a perf server (iperf3's TCP port).
const Port = 5201

// Serve answers perf clients on l until ctx ends or l is closed.
func Serve(ctx context.Context, l *link.Listener, logf func(string, ...any)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			start := time.Now()
			n, err := serveOne(c)
			if logf != nil {
				lc := c.(*link.Conn)
				st := lc.Stats()
				if err != nil {
					logf("perf: %s: %d bytes, then %v", lc, n, err)
				} else {
					logf("perf: %s: %d bytes in %.2f s, %.1f Mbit/s (%d streams; reorder buffer peak %d of %d bytes)", lc.RemoteAddr(), n,
						time.Since(start).Seconds(), float64(n)*8/time.Since(start).Seconds()/1e6, st.Streams, st.Reader.MaxBuffered, st.Reader.Bound)
				}
			}
		}()
	}
}

// serveOne reads to EOF and answers with the count.
func serveOne(c net.Conn) (int64, error) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	var n int64
	var tl timeline
	received := func() int64 { return n }
	if lc, ok := c.(*link.Conn); ok {
		received = func() int64 { return lc.Stats().Reader.Received } // 0 without blocks
	}
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if k > 0 {
			tl.note(time.Now(), n, received)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(append(binary.BigEndian.AppendUint64(nil, uint64(n)), tl.encode()...))
	if err == nil {
		err = c.(*link.Conn).CloseWrite()
	}
	return n, err
}

// Options say what a client measures.
type Options struct {
	Link     link.Options
	Data     string        // "zero" (default), "random" or "text"
	Duration time.Duration // how long to send (default 10s)
	Omit     time.Duration // left out of the steady rate, as iperf3's --omit (default 0)
	Interval time.Duration // between interval reports (default 1s)
	// Report, if set, is called with each interval as it ends.
	Report func(Interval)
}

// Interval is the rate in one interval, from what the client handed to
// the link.
type Interval struct {
	T       float64 `json:"t"` // seconds since the start, at the interval's end
	Mbps    float64 `json:"mbit_per_s"`
	Streams int     `json:"streams"`
}

// Result is a client's report.
type Result struct {
	Addr     string  `json:"addr"`
	Method   string  `json:"method"`
	Streams  int     `json:"streams"` // at the end
	Compress string  `json:"compress"`
	Encrypt  bool    `json:"encrypt"`
	Data     string  `json:"data"`
	Seconds  float64 `json:"seconds"` // from the first byte to the server's answer
	Bytes    int64   `json:"bytes"`   // what the server received
	// WireBytes is what the link sent for them: less with compression.
	WireBytes int64   `json:"wire_bytes"`
	Mbps      float64 `json:"mbit_per_s"`
	// SteadyMbps leaves out the first Omit seconds and counts what the
	// server's link received until Duration after its first byte, from
	// its timeline (SteadyFrom "receiver"); from a server without one, what the link
	// took from the client until its last write (SteadyFrom "sender").
	// SentSteadyMbps is always the latter: it also counts what the
	// buffers on the way (a resumable link's growing window among them)
	// grew by in that span, and so may exceed the path's rate.
	SteadyMbps     float64 `json:"steady_mbit_per_s"`
	SteadyFrom     string  `json:"steady_from"`
	SentSteadyMbps float64 `json:"sent_steady_mbit_per_s"`
	// Received is the server's rate per interval (its own clock, from its
	// first byte), from its timeline; nil from a server without one.
	Received  []Interval      `json:"received,omitempty"`
	WireMbps  float64         `json:"wire_mbit_per_s"`
	Intervals []Interval      `json:"intervals"`
	Tuning    []link.TuneStep `json:"tuning,omitempty"`
	// Blocks counts the data blocks sent by codec; Adaptive is the
	// adaptive compression's last estimate and choice, for people.
	Blocks   link.CodecBlocks `json:"blocks"`
	Adaptive string           `json:"adaptive,omitempty"`
	TuneStop string           `json:"tune_stop,omitempty"`
	SetupMS  float64          `json:"setup_ms"`
	// StreamBytes is what each connection carried, in the order they
	// came (those still there at the end).
	StreamBytes []int64 `json:"stream_bytes,omitempty"`
	// Resume describes the resend window of a resumable link (nil on a
	// link that is not).
	Resume *Resume `json:"resume,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// Resume is how a resumable link's window went in a run.
type Resume struct {
	Window  int `json:"window"`   // bytes, as agreed in the hello
	Grown   int `json:"grown_to"` // the window in use at the end (it grows up to Window)
	MaxKept int `json:"max_kept"` // the most the Writer kept unacknowledged
	// WindowWaitS is how long Write waited for room in the window, in
	// seconds: the window, not the path, held the link back that long.
	WindowWaitS float64 `json:"window_wait_s"`
	Resent      int64   `json:"resent_blocks"`
}

func (o Options) withDefaults() Options {
	if o.Data == "" {
		o.Data = "zero"
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	return o
}

// Run sends over c for o.Duration and reports. c was dialled with
// o.Link; Run closes it.
func Run(c *link.Conn, o Options, setup time.Duration) (Result, error) {
	o = o.withDefaults()
	if c != nil {
		defer c.Close()
	}
	if o.Omit >= o.Duration {
		return Result{}, fmt.Errorf("perf: omitting %v of a %v run leaves nothing to measure", o.Omit, o.Duration)
	}
	res := Result{Addr: c.RemoteAddr().String(), Method: string(c.Method()), Compress: o.Link.Compression.String(),
		Encrypt: c.Encrypted(), Data: o.Data, SetupMS: float64(setup.Microseconds()) / 1000}
	src, err := NewSource(o.Data)
	if err != nil {
		return res, err
	}
	buf := make([]byte, 256<<10)
	start := time.Now()
	end := start.Add(o.Duration)
	nextReport := start.Add(o.Interval)
	var sent, lastSent, atOmit int64
	omitted := o.Omit <= 0
	lastT := start
	for {
		now := time.Now()
		if !omitted && now.Sub(start) >= o.Omit {
			atOmit, omitted = sent, true
		}
		if !now.Before(nextReport) {
			iv := Interval{T: now.Sub(start).Seconds(), Mbps: float64(sent-lastSent) * 8 / now.Sub(lastT).Seconds() / 1e6, Streams: c.Stats().Streams}
			res.Intervals = append(res.Intervals, iv)
			if o.Report != nil {
				o.Report(iv)
			}
			lastSent, lastT = sent, now
			nextReport = nextReport.Add(o.Interval)
		}
		if !now.Before(end) {
			break
		}
		src(buf)
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			return res, fmt.Errorf("perf: sending to %s: %w", res.Addr, err)
		}
	}
	omitAt, wrote := start.Add(o.Omit), time.Now()
	if err := c.CloseWrite(); err != nil {
		return res, fmt.Errorf("perf: ending the stream to %s: %w", res.Addr, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var ans [8]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return res, fmt.Errorf("perf: no count from the server %s: %w", res.Addr, err)
	}
	done := time.Now()
	// An old server ends after the count: no timeline, and the steady
	// rate falls back to the sender's count (SteadyFrom says so), as it
	// does if the timeline is cut short. One that is malformed fails.
	var recv []sample
	if rest, err := io.ReadAll(io.LimitReader(c, 8+sampleLen*maxSamples+1)); err == nil && len(rest) > 0 {
		if recv, err = decodeTimeline(rest); err != nil {
			return res, fmt.Errorf("perf: from the server %s: %w", res.Addr, err)
		}
	}
	st := c.Stats()
	res.Streams = st.Streams
	res.Tuning, res.TuneStop = c.Tuning()
	res.Blocks, res.Adaptive = st.Writer.Blocks, st.Writer.Adaptive
	if st.Window > 0 {
		res.Resume = &Resume{Window: st.Window, Grown: st.Writer.Window, MaxKept: st.Writer.MaxKept, WindowWaitS: st.Writer.WindowWait.Seconds(), Resent: st.Writer.Resent}
	}
	for _, s := range st.Writer.Streams {
		res.StreamBytes = append(res.StreamBytes, s.Bytes)
	}
	res.Bytes = int64(binary.BigEndian.Uint64(ans[:]))
	if res.Bytes != sent {
		return res, fmt.Errorf("perf: sent %d bytes, the server %s received %d", sent, res.Addr, res.Bytes)
	}
	res.WireBytes = res.Bytes
	if st.Writer.Wire > 0 {
		res.WireBytes = st.Writer.Wire
	}
	res.Seconds = done.Sub(start).Seconds()
	res.Mbps = float64(res.Bytes) * 8 / res.Seconds / 1e6
	res.WireMbps = float64(res.WireBytes) * 8 / res.Seconds / 1e6
	// The sender's steady rate is what the link took from the omit time
	// to the last write: the server has confirmed it all arrived, but
	// what the buffers on the way hold may have grown in that span, so
	// the receiver's rate over its own span is preferred. (The rate over
	// the whole run, Mbps, counts up to the server's answer instead: it
	// includes draining the queue.)
	res.SentSteadyMbps = float64(sent-atOmit) * 8 / wrote.Sub(omitAt).Seconds() / 1e6
	res.SteadyMbps, res.SteadyFrom = res.SentSteadyMbps, "sender"
	if r, ok := steadyReceived(recv, o.Omit, o.Duration); ok {
		res.SteadyMbps, res.SteadyFrom = r, "receiver"
		res.Received = receivedIntervals(recv, o.Interval)
	}
	return res, nil
}
