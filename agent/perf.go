package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

// SinkPort is the virtual port of every agent's throughput sink.
//
// Sink protocol: the sender writes any bytes and half-closes; the sink
// reads to EOF, then answers with the count it received as 8 bytes,
// big-endian, and closes. The sender's rate is that count over the time
// until the answer, so bytes still in buffers are not counted as sent.
const SinkPort = 9

// sinkConn reads to EOF and answers with the count.
func sinkConn(c net.Conn) {
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		return
	}
	_, _ = c.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
}

func (a *Agent) perf(w http.ResponseWriter, r *http.Request) {
	var req control.PerfRequest
	if !decode(w, r, "perf", &req) {
		return
	}
	if req.Seconds <= 0 {
		req.Seconds = 5
	}
	addr := withPort(req.Addr, SinkPort)
	res := status.Perf{Addr: addr}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(req.Seconds*float64(time.Second))+30*time.Second)
	defer cancel()
	c, err := a.node.Dial(ctx, addr)
	if err != nil {
		res.Error = err.Error()
		writeJSON(w, res)
		return
	}
	defer c.Close()
	res.Method = string(c.Method())
	res.Bytes, res.Seconds, err = send(c, time.Duration(req.Seconds*float64(time.Second)))
	if err != nil {
		res.Error = err.Error()
	} else {
		res.MbitPerS = float64(res.Bytes) * 8 / res.Seconds / 1e6
	}
	writeJSON(w, res)
}

// send writes for d, half-closes and returns what the sink says it got.
func send(c *vconn.Conn, d time.Duration) (int64, float64, error) {
	buf := make([]byte, 128<<10)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			return 0, 0, fmt.Errorf("send: %w", err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return 0, 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, fmt.Errorf("sink's count: %w", err)
	}
	return int64(binary.BigEndian.Uint64(b[:])), time.Since(start).Seconds(), nil
}
