package hubserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// The accept path: what strangers can make a hub hold and log before
// they prove who they are.
//
// Every accepted connection is pending until its peer's hello is read (or
// its observation answered): the hub's direct.Gate bounds pending
// connections (256 in all, 16 per source address) by shedding the oldest
// idle one when a bound is reached (one whose whole first message is in
// its socket is not idle, read or not: Gate.Spoke). While the gate is
// full, a newcomer that has been silent since it connected (20 ms or
// more: it waited in the kernel's accept queue) is turned away at once
// (Gate.TurnAway) rather than admitted to shed the oldest: it would be
// the next to go, and a node's connection that waited has its ClientHello
// in. Under a flood the accept queue then overflows far less, and a
// node's SYN is not dropped (1 s) nor its connection shed (BENCHMARKS.md,
// issue 32 item 6). A
// connection must send its whole first message (a TLS ClientHello, or an
// observation request) within direct.FirstBytesTimeout, then has
// hub.HandshakeTimeout for the handshake and its hello. Lines about
// connections that fail or are refused before their hello go through a
// direct.Quiet: the first few per reason every 10 s, then one summary.

const (
	// acceptBackoffMax caps the pause of an accept loop out of file
	// descriptors with nothing pending to shed.
	acceptBackoffMax = 100 * time.Millisecond
	// listenBacklog is the hub's accept queue (tuneListener): Go asks for
	// somaxconn, which some systems raise to 65535; under a flood the
	// queue stays full and a newcomer waits in it for its length over the
	// rate the hub drains it (about 5000 a second on a loaded 2-core
	// machine). A shorter queue is no cure: a full one drops the
	// newcomer's SYN, and its retransmission waits 1 s.
	listenBacklog = 4096
)

// Kinds of log lines of the accept path (keys of the hub's Quiet; each
// is the noun the summary line counts).
const (
	quietShed   direct.QuietKind = "pending connections shed"
	quietSilent direct.QuietKind = "connections that sent no ClientHello in time"
	quietFailed direct.QuietKind = "failed handshakes"
	quietAccept direct.QuietKind = "accept errors"
)

func (h *Hub) newQuiet() *direct.Quiet {
	return direct.NewQuiet(0, 0, func(reason direct.QuietKind, more int, since time.Time) {
		h.logf("hub %s: %d more %s since %s", h.cfg.Name, more, reason, since.Format(time.TimeOnly))
	})
}

// logQuiet logs a line of the accept path, rate-limited by kind.
func (h *Hub) logQuiet(kind direct.QuietKind, format string, args ...any) {
	if h.quiet.Allow(kind) {
		h.logf(format, args...)
	}
}

// spoke tells the hub's gate whether a connection's whole first message,
// a TLS ClientHello or an observation request, is in its socket.
func spoke(c net.Conn) bool { return direct.WholeFirstMessage(c, wire.ObserveRequest) }

// outOfFiles tells an accept error that a spare descriptor would cure.
func outOfFiles(err error) bool {
	return errors.Is(err, errTooManyFiles) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// acceptLoops runs one accept loop per CPU (up to 4): under a flood the
// kernel's accept queue is full, and how long a newcomer waits in it is
// its length over the rate the hub drains it. It returns the first
// loop's error, or nil when all end with ctx.
func (h *Hub) acceptLoops(ctx context.Context) error {
	n := min(max(runtime.GOMAXPROCS(0), 1), 4)
	errs := make(chan error, n)
	for range n {
		h.wg.Add(1)
		go func() { defer h.wg.Done(); errs <- h.acceptLoop(ctx) }()
	}
	for range n {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func (h *Hub) acceptLoop(ctx context.Context) error {
	retry := backoff.ExponentialBackOff{InitialInterval: 5 * time.Millisecond, Multiplier: 2, MaxInterval: acceptBackoffMax}
	for {
		c, err := h.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout() || outOfFiles(err)) {
				return err
			}
			if outOfFiles(err) {
				// Make room by shedding the oldest pending connection, and
				// take the next one at once.
				if s, ok := h.gate.ShedOldest(fmt.Sprintf("out of file descriptors (%v)", err)); ok {
					h.counts.refuse(refShed)
					h.logQuiet(quietShed, "hub %s: connection from %s: %s", h.cfg.Name, s.From, s.Reason)
					continue
				}
			}
			delay := retry.NextBackOff()
			h.logQuiet(quietAccept, "hub %s: accept: %v; retrying in %v", h.cfg.Name, err, delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		retry.Reset()
		if s := h.gate.TurnAway(c); s != nil {
			h.counts.refuse(refShed)
			h.logQuiet(quietShed, "hub %s: connection from %s: %s", h.cfg.Name, s.From, s.Reason)
			continue
		}
		pend, shed := h.gate.Admit(c)
		if shed != nil {
			h.counts.refuse(refShed)
			h.logQuiet(quietShed, "hub %s: connection from %s: %s", h.cfg.Name, shed.From, shed.Reason)
		}
		h.wg.Add(1)
		go func() { defer h.wg.Done(); h.serveConn(ctx, c, pend) }()
	}
}

// logHandshake logs why an incoming connection failed before its hello:
// shed by the gate (logged when shed), silent past its first-bytes
// deadline, refused (the reason in words, as the peer reads it), or
// another failure.
func (h *Hub) logHandshake(c net.Conn, pend *direct.Pending, err error) {
	switch {
	case pend.Err() != nil:
		// logged by the accept loop when it shed the connection
	case errors.Is(err, pki.ErrDenied):
		h.counts.refuse(refNotAdmitted)
		h.logQuiet(direct.RefusalKind(err), "hub %s: connection from %s: %v", h.cfg.Name, c.RemoteAddr(), err)
	default:
		h.logQuiet(quietFailed, "hub %s: connection from %s: %v", h.cfg.Name, c.RemoteAddr(), err)
	}
}
