// Package matrix measures connectivity between the sites of a running lab:
// from the representative host of every site (a compute node, or the only
// machine) to that of every other site. It owns the measurement and its
// reports (the paper-style table and JSON); bringing the lab up is package
// lab's. Later layers add their own columns beside "plain".
package matrix

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Result is one connection attempt.
type Result struct {
	OK    bool    `json:"ok"`
	MS    float64 `json:"ms"`              // connection setup time, median of 5 (failures: time until giving up)
	Addr  string  `json:"addr"`            // the address dialled
	Error string  `json:"error,omitempty"` // why it failed
}

// Pair is one ordered pair of sites.
type Pair struct {
	Src      string          `json:"src"`
	Dst      string          `json:"dst"`
	Plain    Result          `json:"plain"`
	Gridlink *GridlinkResult `json:"gridlink,omitempty"`
}

// Summary counts the pairs.
type Summary struct {
	Total      int  `json:"total"`
	PlainOK    int  `json:"plain_ok"`
	GridlinkOK *int `json:"gridlink_ok,omitempty"`
}

// Matrix is the report.
type Matrix struct {
	Topology string   `json:"topology"`
	Sites    []string `json:"sites"`
	Pairs    []Pair   `json:"pairs"`
	Summary  Summary  `json:"summary"`
}

// Plain makes a plain TCP connection for every ordered pair of sites of the
// running lab t, each to the target's primary address (public if it has
// one), giving up after timeout. A connection counts only if it reached the
// intended host: the listener names itself, since a private address may
// belong to another machine than the one meant.
func Plain(ctx context.Context, t *topology.Topology, timeout time.Duration) (*Matrix, error) {
	return PlainPairs(ctx, t, timeout, nil)
}

// PlainPairs is Plain for the ordered pairs keep admits (nil: all).
func PlainPairs(ctx context.Context, t *topology.Topology, timeout time.Duration, keep func(src, dst string) bool) (*Matrix, error) {
	m := &Matrix{Topology: t.Name}
	ports := map[string]uint16{}
	for _, s := range t.Sites {
		m.Sites = append(m.Sites, s.Name)
		h := s.MatrixHost()
		ln, err := listen(h)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[s.Name] = uint16(ln.Addr().(*net.TCPAddr).Port)
	}
	for _, src := range t.Sites {
		for _, dst := range t.Sites {
			if src != dst && (keep == nil || keep(src.Name, dst.Name)) {
				m.Pairs = append(m.Pairs, Pair{Src: src.Name, Dst: dst.Name})
			}
		}
	}
	var wg sync.WaitGroup
	for i := range m.Pairs {
		p := &m.Pairs[i]
		src, dst := t.Site(p.Src).MatrixHost(), t.Site(p.Dst).MatrixHost()
		to := netip.AddrPortFrom(dst.PrimaryAddr(), ports[p.Dst])
		wg.Add(1)
		go func() {
			defer wg.Done()
			// a working pair is measured five times, its median reported.
			p.Plain = dialPlain(ctx, src, dst, to, timeout)
			if p.Plain.OK {
				times := []float64{p.Plain.MS}
				for i := 0; i < 4; i++ {
					if r := dialPlain(ctx, src, dst, to, timeout); r.OK {
						times = append(times, r.MS)
					}
				}
				p.Plain.MS = median(times)
			}
		}()
	}
	wg.Wait()
	m.Summary.Total = len(m.Pairs)
	for _, p := range m.Pairs {
		if p.Plain.OK {
			m.Summary.PlainOK++
		}
	}
	return m, ctx.Err()
}

const helloPrefix = "gridlab matrix "

// listen opens a TCP listener inside h's namespace that greets every
// connection with h's ID.
func listen(h *topology.Host) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do(lab.HostNS(h), func() (err error) {
		ln, err = net.Listen("tcp4", "0.0.0.0:0")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("matrix: listen on %s: %w", h.ID(), err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, helloPrefix+h.ID()+"\n")
			c.Close()
		}
	}()
	return ln, nil
}

func dialPlain(ctx context.Context, src, dst *topology.Host, to netip.AddrPort, timeout time.Duration) Result {
	r := Result{Addr: to.String()}
	var conn net.Conn
	var elapsed time.Duration
	err := netns.Do(lab.HostNS(src), func() (err error) {
		d := net.Dialer{Timeout: timeout}
		start := time.Now()
		conn, err = d.DialContext(ctx, "tcp4", to.String())
		elapsed = time.Since(start)
		return err
	})
	r.MS = float64(elapsed.Microseconds()) / 1000
	if err != nil {
		r.Error = explain(err, timeout)
		return r
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		r.Error = fmt.Sprintf("connected to %s but got no greeting: %v", to, err)
		return r
	}
	if got := strings.TrimSpace(strings.TrimPrefix(line, helloPrefix)); got != dst.ID() {
		r.Error = fmt.Sprintf("reached the wrong host: %s answers at %s, not %s", got, to, dst.ID())
		return r
	}
	r.OK = true
	return r
}

// explain turns a dial error into words a user can act on.
func explain(err error, timeout time.Duration) string {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("%v (no answer within %v: dropped by a firewall or NAT, or no route beyond a site)", err, timeout)
	case errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("%v (the source host has no route there: a non-routed network)", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("%v (the host answered but rejected it)", err)
	}
	return err.Error()
}

// WriteJSON writes m as one JSON object.
func (m *Matrix) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// Cell formats one pair for a table.
type Cell func(p *Pair) string

// PlainCell shows the plain TCP setup time, or "-" for no connection.
func PlainCell(p *Pair) string {
	if !p.Plain.OK {
		return "-"
	}
	return fmt.Sprintf("%.1f", p.Plain.MS)
}

// GridlinkCell shows the uncached gridlink setup time and the method's
// letter as in the paper (d direct, r reverse, s splice, v routed), or "-".
func GridlinkCell(p *Pair) string {
	g := p.Gridlink
	if g == nil || !g.OK {
		return "-"
	}
	letter := map[string]string{"direct": "d", "reverse": "r", "splice": "s", "routed": "v"}[g.Method]
	return fmt.Sprintf("%.1f %s", g.FirstMS, letter)
}

// WriteTable writes m laid out like the paper's Table 3: one row per target
// site, one column per source site; with several cells, their tables stand
// side by side.
func (m *Matrix) WriteTable(w io.Writer, titles []string, cells []Cell) {
	const width = 10
	for i, title := range titles {
		if i > 0 {
			fmt.Fprintf(w, "   |  ")
		}
		fmt.Fprintf(w, "%-*s", 16+width*len(m.Sites), title)
	}
	fmt.Fprintln(w)
	for i := range cells {
		if i > 0 {
			fmt.Fprintf(w, "   |  ")
		}
		fmt.Fprintf(w, "%-16s", "target \\ source")
		for _, s := range m.Sites {
			fmt.Fprintf(w, "%*s", width, s)
		}
	}
	fmt.Fprintln(w)
	for _, dst := range m.Sites {
		for i, cell := range cells {
			if i > 0 {
				fmt.Fprintf(w, "   |  ")
			}
			fmt.Fprintf(w, "%-16s", dst)
			for _, src := range m.Sites {
				c := ""
				if p := m.pair(src, dst); p != nil {
					c = cell(p)
				}
				fmt.Fprintf(w, "%*s", width, c)
			}
		}
		fmt.Fprintln(w)
	}
}

func (m *Matrix) pair(src, dst string) *Pair {
	for i := range m.Pairs {
		if m.Pairs[i].Src == src && m.Pairs[i].Dst == dst {
			return &m.Pairs[i]
		}
	}
	return nil
}
