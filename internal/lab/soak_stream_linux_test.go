package lab_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// The soak's virtual-network flows: a TCP stream from one node's host to
// another's by NAME.grid (the name resolved in the sender's namespace,
// through the resolver its node agent points at its name server), whose
// bytes are a sequence the receiver checks; at the soak's end the sender
// half-closes and the receiver answers with the count it received,
// which must be the count sent. A connection that breaks is a failure
// (its reason, the bytes sent and confirmed so far), and another starts.

const (
	streamPort  = 7100
	streamChunk = 16 << 10
	streamEvery = 125 * time.Millisecond // 128 KiB/s per flow
	streamIdle  = 60 * time.Second       // no byte for this long: a failure
	stallMin    = time.Second            // a longer gap between a flow's bytes is a stall
)

// stall is a gap between a flow's bytes at its receiver (across
// connections: the next connection's first byte ends the gap).
type stall struct {
	path        opPath
	from, until time.Time
}

// gotBytes notes bytes of the flow to receiver at now, and a stall if
// the flow's last bytes came more than stallMin before.
func (S *soak) gotBytes(receiver string, path opPath, now time.Time) {
	S.mu.Lock()
	defer S.mu.Unlock()
	if S.lastByte == nil {
		S.lastByte = map[string]time.Time{}
	}
	if prev := S.lastByte[receiver]; !prev.IsZero() && now.Sub(prev) > stallMin {
		S.stalls = append(S.stalls, stall{path: path, from: prev, until: now})
	}
	S.lastByte[receiver] = now
}

// longestStalls is the longest stall each chaos kind on its path
// explains, and (kind "") the longest no chaos on its path explains.
func (m pathModel) longestStalls(stalls []stall, events []chaosEvent) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, st := range stalls {
		d := st.until.Sub(st.from)
		kinds := []string{""}
		if ex := m.explaining(st.path, events, st.from, st.until); len(ex) > 0 {
			kinds = kinds[:0]
			for _, ev := range ex {
				kinds = append(kinds, ev.kind)
			}
		}
		for _, k := range kinds {
			out[k] = max(out[k], d)
		}
	}
	return out
}

// stallReport is the report's line of the longest vip stall per chaos
// kind.
func (S *soak) stallReport(w io.Writer) {
	longest := S.paths.longestStalls(S.stalls, S.events)
	kinds := make([]string, 0, len(longest))
	for k := range longest {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "Vip stalls (gaps over %v between a flow's bytes): %d; the longest by the chaos on its path:", stallMin, len(S.stalls))
	for _, k := range kinds {
		name := k
		if k == "" {
			name = "no chaos on its path"
		}
		fmt.Fprintf(w, " %s %v;", name, longest[k].Round(100*time.Millisecond))
	}
	fmt.Fprintln(w)
}

// streamByte is byte p of the checked sequence: the little-endian bytes
// of (p/8+1) times a large odd constant.
func streamByte(p int64) byte {
	w := uint64(p/8+1) * 0x9E3779B97F4A7C15
	return byte(w >> (8 * (p % 8)))
}

// streams starts a flow for each (from, to) pair of hosts.
func (S *soak) streams(ctx context.Context, wg *sync.WaitGroup, pairs [][2]string) {
	// a receiver's path: it and every sender to it (it cannot tell
	// which a connection is from by the virtual address)
	senders := map[string][]string{}
	for _, p := range pairs {
		senders[p[1]] = append(senders[p[1]], p[0])
	}
	listening := map[string]bool{}
	for _, p := range pairs {
		src, dst := S.host(p[0]), S.host(p[1])
		if !listening[p[1]] {
			path := S.path(append([]string{p[1]}, senders[p[1]]...)...)
			labtest.Listen(S.t, dst, fmt.Sprintf(":%d", streamPort), func(c net.Conn) { S.receive(dst, path, c) })
			listening[p[1]] = true
		}
		wg.Go(func() { S.sendLoop(ctx, src, dst) })
	}
}

// receive checks a flow's bytes as they come and answers the sender's
// half-close with the count received.
func (S *soak) receive(h *topology.Host, path opPath, c net.Conn) {
	op := fmt.Sprintf("vip stream %s -> %s.grid (receiver)", c.RemoteAddr(), h.ID())
	began := time.Now()
	buf := make([]byte, 64<<10)
	var p int64
	for {
		_ = c.SetReadDeadline(time.Now().Add(streamIdle))
		n, err := c.Read(buf)
		for i := range n {
			if buf[i] != streamByte(p+int64(i)) {
				bad := int64(0)
				for j := i; j < n; j++ {
					if buf[j] != streamByte(p+int64(j)) {
						bad++
					}
				}
				S.corrupt.Add(bad)
				S.fail(op, path, began, fmt.Sprintf("byte %d differs (%d of the next %d bytes)", p+int64(i), bad, n-i))
				return
			}
		}
		p += int64(n)
		if n > 0 {
			S.gotBytes(h.ID(), path, time.Now())
		}
		S.verified("vip stream", "bytes", int64(n))
		if errors.Is(err, io.EOF) {
			var total [8]byte
			binary.BigEndian.PutUint64(total[:], uint64(p))
			_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
			_, _ = c.Write(total[:])
			return
		}
		if err != nil {
			S.fail(op, path, began, fmt.Sprintf("after %d bytes: %v", p, err))
			return
		}
	}
}

// sendLoop keeps a flow from src to dst.grid until ctx ends.
func (S *soak) sendLoop(ctx context.Context, src, dst *topology.Host) {
	name := dst.ID() + ".grid"
	op := fmt.Sprintf("vip stream %s -> %s", src.ID(), name)
	path := S.path(src.ID(), dst.ID())
	for ctx.Err() == nil {
		began := time.Now()
		sent, confirmed, err := S.sendOnce(ctx, src, name)
		if err != nil {
			S.count("vip stream", "bytes", false, 0)
			S.fail(op, path, began, fmt.Sprintf("%v (%d bytes sent on this connection)", err, sent))
			pause(ctx, 2*time.Second)
			continue
		}
		S.count("vip stream", "bytes", confirmed == sent, 0)
		if confirmed != sent {
			S.lost.Add(sent - confirmed)
			S.fail(op, path, began, fmt.Sprintf("sent %d bytes, the receiver counted %d", sent, confirmed))
		}
	}
}

// sendOnce resolves name in src's namespace, connects and sends the
// sequence until ctx ends, then half-closes and reads the count the
// receiver confirms.
func (S *soak) sendOnce(ctx context.Context, src *topology.Host, name string) (sent, confirmed int64, err error) {
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	out, errb, err := tryIn(rctx, src, nil, "getent", "ahostsv4", name)
	cancel()
	if err != nil {
		return 0, 0, fmt.Errorf("resolve %s: %v %s", name, err, strings.TrimSpace(string(errb)))
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return 0, 0, fmt.Errorf("resolve %s: no address", name)
	}
	c, err := labtest.Dial(src, net.JoinHostPort(fields[0], fmt.Sprint(streamPort)), "", 20*time.Second)
	if err != nil {
		return 0, 0, fmt.Errorf("connect to %s (%s): %w", name, fields[0], err)
	}
	defer c.Close()
	buf := make([]byte, streamChunk)
	tick := time.NewTicker(streamEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				return sent, 0, fmt.Errorf("half-close: %w", err)
			}
			var total [8]byte
			_ = c.SetReadDeadline(time.Now().Add(streamIdle))
			if _, err := io.ReadFull(c, total[:]); err != nil {
				return sent, 0, fmt.Errorf("the receiver's count: %w", err)
			}
			return sent, int64(binary.BigEndian.Uint64(total[:])), nil
		case <-tick.C:
		}
		for i := range buf {
			buf[i] = streamByte(sent + int64(i))
		}
		_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			return sent, 0, fmt.Errorf("write: %w", err)
		}
	}
}
