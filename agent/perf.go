package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

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

// PerfRequest is the body of POST /perf.
type PerfRequest struct {
	Addr    string  `json:"addr"`    // NODE[:PORT]; the sink port by default
	Seconds float64 `json:"seconds"` // how long to send (default 5)
}

// PerfResult is the answer of POST /perf.
type PerfResult struct {
	Addr    string  `json:"addr"`
	Method  string  `json:"method"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Mbps    float64 `json:"mbit_per_s"`
	Error   string  `json:"error,omitempty"`
}

func (a *Agent) perf(w http.ResponseWriter, r *http.Request) {
	var req PerfRequest
	if !decode(w, r, "perf", &req) {
		return
	}
	if req.Seconds <= 0 {
		req.Seconds = 5
	}
	addr := withPort(req.Addr, SinkPort)
	res := PerfResult{Addr: addr}
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
		res.Mbps = float64(res.Bytes) * 8 / res.Seconds / 1e6
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

// Perf asks the agent to measure throughput to a node's sink.
func (c *Client) Perf(ctx context.Context, req PerfRequest) (*PerfResult, error) {
	var res PerfResult
	return &res, c.do(ctx, "POST", "/perf", req, &res)
}
