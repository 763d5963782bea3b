package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/wire"
)

// SessionConfig configures a node's session with its hub.
type SessionConfig struct {
	Creds *pki.Credentials // required
	// Machine is this node (ID must match Creds; zero: taken from Creds);
	// the session fills Hub and HubName. Session.SetMachine replaces it.
	Machine identity.Machine
	// Hubs are hub transport specs to try, in order of preference (the
	// first is the node's home). On loss of the hub the session
	// re-attaches to the next that answers (with backoff); its circuits
	// are reset. Later it returns to an earlier one (NoReturn).
	Hubs []string
	// NoReturn keeps the node on the hub it re-attached to after losing
	// one. Zero (false): while attached to a hub that is not the first of
	// Hubs, the session probes the hubs before it (2 s, doubling up to
	// 30 s while they fail, jittered) and moves to the first that admits
	// it, attached there before it leaves the other (home.go).
	NoReturn bool
	Dial     func(ctx context.Context, spec string) (net.Conn, error) // default plain TCP
	Logf     func(format string, args ...any)                         // default log.Printf
}

// ErrNotFound is wrapped by Lookup when no hub knows the node.
var ErrNotFound = errors.New("node not found")

// ErrClosed is returned by a closed session.
var ErrClosed = errors.New("hub: session closed")

const (
	incomingQueue = 64  // circuits opened toward us not yet taken
	messageQueue  = 256 // routed messages not yet taken
	// attachGiveUp bounds Attach when its context has no deadline.
	attachGiveUp = 30 * time.Second
	// attachWait is how long a request waits for a hub while the session
	// has none (a re-attach to the next hub usually takes less) before it
	// fails with a *NotAttachedError.
	attachWait = 250 * time.Millisecond
	// attachLogEvery repeats an unchanged "attaching to ..." line.
	attachLogEvery = time.Minute
	// dialTimeout bounds one attempt: transport, handshake and hello.
	dialTimeout = 10 * time.Second
	// backoffMin and backoffMax bound the pause between rounds of
	// attempts.
	backoffMin = 250 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Session is a node's attachment to a hub: lookups, routed messages and
// circuits. Make one with Attach (which waits for a hub) or Connect
// (which attaches in the background).
//
// Its state, by concern; mu guards what is marked so (one lock: the
// attachment and the requests on it are small and change together).
type Session struct {
	// Fixed by Connect.
	cfg  SessionConfig
	logf func(string, ...any)

	mu sync.Mutex

	// The attachment (session.go, attach.go), under mu.
	cur        *slink           // nil while re-attaching
	curIdx     int              // index in cfg.Hubs of the current hub
	machine    identity.Machine // what the hub is told: cfg.Machine, then SetMachine's
	ready      chan struct{}    // closed while attached
	since      time.Time        // not attached since (while cur is nil)
	cause      error            // why not attached (while cur is nil)
	firstRound chan struct{}    // closed once the first round of attempts ended
	logged     string           // the class of the last "attaching to" round logged
	loggedAt   time.Time
	refused    error         // a permanent refusal that ended the session's attachments
	gaveUp     chan struct{} // closed with refused
	closed     bool
	instance   string               // this process's, in every hello (instance.go)
	noInstance map[identity.ID]bool // hubs sent no instance (instance.go)

	// Requests waiting for the hub's answers (requests.go), under mu.
	lookups    map[uint64]chan *wire.Found
	hubQueries map[uint64]chan []wire.RouteAd
	nextQ      uint64

	// Virtual addresses (vipaddr.go).
	vip vipSession

	// Running until Close: what the hub sends the node, and the
	// goroutines that read it.
	ctx      context.Context
	cancel   context.CancelFunc
	messages chan *wire.Routed
	incoming chan *Incoming
	done     chan struct{}
	wg       sync.WaitGroup
}

// slink is one attachment: a trunk to a hub and the circuits on it.
type slink struct {
	s        *Session
	t        *Trunk
	hub      identity.Machine
	observed netip.AddrPort
	version  int              // the hub's protocol version (its hello's)
	sent     identity.Machine // the machine this link's hub was last told (under s.mu)

	mu       sync.Mutex
	circuits map[uint32]*Circuit // nil once the link is gone
	nextCirc uint32
}

// Incoming is a circuit opened toward this node: Accept or Refuse it.
type Incoming struct {
	Circuit *Circuit
	Open    *wire.Open
}

// Accept accepts the circuit (after which it may be written to).
func (in *Incoming) Accept() error {
	c := in.Circuit
	c.mu.Lock()
	switch {
	case c.err != nil:
		c.mu.Unlock()
		return c.err
	case c.closed:
		c.mu.Unlock()
		return net.ErrClosed
	case c.established:
		c.mu.Unlock()
		return errors.New("hub: circuit already accepted")
	}
	c.established = true
	c.epoch = monotime()
	b, _ := json.Marshal(&wire.Accept{Window: uint32(c.rwin)})
	ok := c.sl.t.Send(wire.TAccept, 0, c.id, b)
	if ok {
		c.pingLocked()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if !ok {
		return c.linkErr()
	}
	return nil
}

// Refuse refuses the circuit; the opener's Read and Write fail with
// a *direct.RefusedError with reason (e.g. "no listener on port 7000 at
// das3v-n1"); the circuit's own end fails with the same, Here.
func (in *Incoming) Refuse(reason string) {
	c := in.Circuit
	c.fail(&direct.RefusedError{What: direct.RefusedConnection, Here: true, Peer: c.local.ID, Reason: reason})
	if !strings.HasPrefix(reason, "connection refused") {
		reason = "connection refused: " + reason
	}
	c.sl.t.Send(wire.TReset, 0, c.id, []byte(reason))
	c.sl.remove(c)
}

// Attach attaches to the first hub of cfg.Hubs that answers, trying them
// in rounds with backoff until ctx is done (or 30 s if ctx has no
// deadline), or until every hub refused the node's certificate, or one
// refused its role or name (a *RefusedError, errors.Is ErrPermanent: the
// holder of a name taken is named in it). The session then lives until
// Close; if a hub later gives its name to another node (Refused), it
// stops re-attaching.
func Attach(ctx context.Context, cfg SessionConfig) (*Session, error) {
	s, err := Connect(cfg)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, attachGiveUp)
		defer cancel()
	}
	if err := s.WaitAttached(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// attachLoop tries the hubs in order from start, in rounds with backoff,
// until one answers or ctx is done.
func (s *Session) attachLoop(ctx context.Context, start int) (*slink, int, error) {
	retry := backoff.ExponentialBackOff{InitialInterval: backoffMin, Multiplier: 2, MaxInterval: backoffMax}
	n := len(s.cfg.Hubs)
	errs := make([]string, n)
	for {
		round := &RoundError{Errs: map[string]error{}} // read by others once recorded
		var denied error
		refusals := 0
		for k := range n {
			i := (start + k) % n
			sl, err := s.attachTo(ctx, s.cfg.Hubs[i])
			if err == nil {
				return sl, i, nil
			}
			if errors.Is(err, ErrPermanent) {
				// refused for its role or name: every hub of the
				// overlay judges those alike.
				return nil, 0, fmt.Errorf("hub: %s: %w", s.cfg.Hubs[i], err)
			}
			errs[i] = s.cfg.Hubs[i] + ": " + err.Error()
			round.Errs[s.cfg.Hubs[i]] = err
			if errors.Is(err, pki.ErrDenied) {
				refusals++
				denied = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		if refusals == n {
			// Every hub refused this node's certificate: trying again
			// will not change that.
			return nil, 0, &refusedError{list: strings.Join(compact(errs), "; "), last: denied}
		}
		if ctx.Err() == nil {
			round.text = strings.Join(compact(errs), "; ")
			s.roundFailed(round)
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("hub: cannot attach to any hub (%s): %w", strings.Join(compact(errs), "; "), ctx.Err())
		case <-s.done:
			return nil, 0, ErrClosed
		case <-time.After(retry.NextBackOff()):
		}
	}
}

// refusedError says that every hub refused this node, each with its
// reason, once; it unwraps to the last refusal (pki.ErrDenied).
type refusedError struct {
	list string // "hub: reason; hub: reason"
	last error
}

func (e *refusedError) Error() string { return "hub: every hub refused this node (" + e.list + ")" }
func (e *refusedError) Unwrap() error { return e.last }

func compact(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// attachTo attaches to one hub: transport, handshake, hello both ways.
func (s *Session) attachTo(ctx context.Context, spec string) (*slink, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := s.cfg.Dial(ctx, spec)
	if err != nil {
		return nil, err
	}
	sec, err := Secure(ctx, s.cfg.Creds, c, true, identity.ID{}, ca.Hub)
	if err != nil {
		c.Close()
		return nil, err
	}
	hubID, sealer, r := sec.Peer, sec.Sealer, sec.Reader
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	me, inst := s.self(), s.instanceFor(hubID)
	if err := WriteHello(c, sealer, &wire.Hello{Role: "node", Machine: me, Version: wire.Version, Instance: inst}); err != nil {
		err = sec.Explain(err)
		c.Close()
		return nil, err
	}
	if err := sec.Verdict(); err != nil {
		c.Close()
		return nil, err
	}
	hello, err := sec.ReadHello()
	s.helloAnswered(hubID, inst, hello, err)
	if err != nil {
		c.Close()
		return nil, err
	}
	if hello.Role != "hub" {
		c.Close()
		return nil, fmt.Errorf("%s is a %s, not a hub", hubID.Short(), hello.Role)
	}
	_ = c.SetDeadline(time.Time{})
	hub := hello.Machine
	if hub.Name == "" {
		hub.Name = hub.ID.Short()
	}
	sl := &slink{s: s, hub: hub, observed: hello.Observed, version: hello.Version, sent: me, circuits: map[uint32]*Circuit{}, nextCirc: FirstCircuit(true)}
	sl.t = NewTrunk(c, sealer, fmt.Sprintf("hub %s (%s)", hub.Name, c.RemoteAddr()), false)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := sl.t.ReadLoop(r, sl.handle)
		s.detach(sl, err)
	}()
	if t := s.cfg.Creds.Trust(); t != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchRevocation(sl, sec.TLS.Peer, t)
		}()
	}
	return sl, nil
}

// watchRevocation drops the link to a hub that a new revocation list
// revokes; the session then attaches to another hub.
func (s *Session) watchRevocation(sl *slink, hub pki.Peer, t *pki.Trust) {
	t.OnChange(sl.t.Done(), func() {
		if err := t.Recheck(hub); err != nil {
			s.logf("session: dropping %s, no longer admitted: %v", sl.t.Desc(), err)
			sl.t.Close(fmt.Errorf("%s is no longer admitted: %w", hub, err))
		}
	})
}

func (s *Session) install(sl *slink, idx int) bool { return s.installWith(sl, idx, nil) }

// installWith makes sl the current link; claimed are the virtual
// addresses already claimed on it (nil: none; claimed again unless they
// are what the node wants).
func (s *Session) installWith(sl *slink, idx int, claimed *wire.Virtual) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sl.t.Close(ErrClosed)
		return false
	}
	s.cur, s.curIdx = sl, idx
	s.catchUpLocked(sl)
	if claimed == nil || claimed.V4 != s.vip.want.V4 || claimed.V6 != s.vip.want.V6 {
		s.reclaimAddrsLocked(sl)
	}
	select {
	case <-s.ready: // the lost link was not detached yet: still marked ready
	default:
		close(s.ready)
	}
	return true
}

// detach forgets a lost link: its circuits are reset.
func (s *Session) detach(sl *slink, cause error) {
	s.mu.Lock()
	if s.cur == sl {
		s.cur = nil
		s.ready = make(chan struct{})
		s.since, s.cause = time.Now(), fmt.Errorf("lost hub %s: %v", sl.hub.Name, cause)
	}
	s.mu.Unlock()
	sl.mu.Lock()
	cs := sl.circuits
	sl.circuits = nil
	sl.mu.Unlock()
	err := fmt.Errorf("%w: hub link to %s lost: %v", ErrReset, sl.hub.Name, cause)
	for _, c := range cs {
		c.fail(err)
		c.mu.Lock()
		c.removed = true
		c.mu.Unlock()
	}
}

// keep pings the hub until the link is lost (its error) or the session
// closed (nil). Attached to hub idx > 0, it probes the hubs before it
// (home.go) and returns the link to one that admitted the node (err nil:
// a move; else the lost link's error, the probe's link to re-attach to).
func (s *Session) keep(sl *slink, idx int, home *homeward) (next probed, err error) {
	t := time.NewTicker(NodePingEvery)
	defer t.Stop()
	var probeAt <-chan time.Time
	if idx > 0 && !s.cfg.NoReturn {
		pt := time.NewTimer(home.next())
		defer pt.Stop()
		probeAt = pt.C
	}
	pctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var results chan probed // a probe under way
	for {
		select {
		case <-s.done:
			cancel()
			if results != nil {
				if r := <-results; r.sl != nil {
					r.sl.t.Close(ErrClosed)
				}
			}
			return probed{}, nil
		case <-t.C:
			if d := sl.t.SilentFor(); d > NodeSilence {
				sl.t.Close(&SilentError{d.Round(time.Millisecond)})
			} else {
				sl.t.Ping()
			}
		case <-probeAt:
			probeAt = nil
			results = make(chan probed, 1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				results <- s.probe(pctx, sl, idx)
			}()
		case r := <-results:
			results = nil
			if r.sl != nil {
				return r, nil
			}
			if s.ctx.Err() != nil {
				return probed{}, nil
			}
			s.probeFailed(home, sl, r.err)
			probeAt = time.After(home.next())
		case <-sl.t.Done():
			cancel() // a probe under way ends: re-attaching does not wait for it
			var r probed
			if results != nil {
				r = <-results // a preferred hub that admitted the node just now takes it
			}
			if s.ctx.Err() != nil {
				if r.sl != nil {
					r.sl.t.Close(ErrClosed)
				}
				return probed{}, nil
			}
			return r, sl.t.Cause()
		}
	}
}

// giveUp ends re-attaching for a refusal that trying again cannot
// change: what waits for a hub gets err.
func (s *Session) giveUp(err error) {
	s.logf("hub: node %s: not attaching again: %v", s.cfg.Machine, err)
	s.mu.Lock()
	s.refused = err
	ready := s.ready
	s.mu.Unlock()
	select {
	case <-ready:
	default:
		close(ready)
	}
	close(s.gaveUp)
}

// Refused is the refusal that ended the session's attachments (nil while
// it attaches or re-attaches): e.g. the hubs gave its name to a node whose
// certificate certifies it (errors.Is ErrNameTaken).
func (s *Session) Refused() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// current waits for an attached link: while the session has none, for
// attachWait at most (a re-attach to the next hub), then it fails with a
// *NotAttachedError.
func (s *Session) current(ctx context.Context) (*slink, error) {
	var wait <-chan time.Time
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if s.refused != nil {
			err := s.refused
			s.mu.Unlock()
			return nil, err
		}
		sl, ready := s.cur, s.ready
		s.mu.Unlock()
		if sl != nil && !sl.t.IsClosed() {
			return sl, nil
		}
		if wait == nil {
			wait = time.After(attachWait)
		}
		select {
		case <-ready:
		case <-s.done:
			return nil, ErrClosed
		case <-wait:
			s.mu.Lock()
			err := s.notAttachedLocked()
			s.mu.Unlock()
			if err == nil { // attached just now
				continue
			}
			return nil, fmt.Errorf("hub: %w", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("hub: not attached to a hub: %w", ctx.Err())
		}
	}
}

// Hub is the hub the session is attached to (or was last).
func (s *Session) Hub() identity.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return identity.Machine{}
	}
	return s.cur.hub
}

// HubChoice is the current hub's place in the node's hubs
// (SessionConfig.Hubs, the first its home: 0 there, -1 while it has no
// hub), the number of hubs, and whether it returns to an earlier one
// (not NoReturn): a node at 1 of 2 that returns probes its first.
func (s *Session) HubChoice() (idx, of int, returns bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx = s.curIdx
	if s.cur == nil {
		idx = -1
	}
	return idx, len(s.cfg.Hubs), !s.cfg.NoReturn
}

// Machine is this node's identifier with its current hub filled in.
func (s *Session) Machine() identity.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machine
	if s.cur != nil {
		m.Hub, m.HubName = s.cur.hub.ID, s.cur.hub.Name
		if s.cur.observed.IsValid() {
			m.Observed = append(m.Observed[:len(m.Observed):len(m.Observed)], s.cur.observed)
		}
	}
	return m
}

// Observed is our address as the hub saw it.
func (s *Session) Observed() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return netip.AddrPort{}
	}
	return s.cur.observed
}

// Messages delivers routed messages for this node (e.g. reverse requests).
// Messages that find the channel full are dropped. It is closed by Close.
func (s *Session) Messages() <-chan *wire.Routed { return s.messages }

// Incoming delivers circuits opened toward this node. A circuit that finds
// the channel full is refused. It is closed by Close.
func (s *Session) Incoming() <-chan *Incoming { return s.incoming }

// Close detaches: circuits are reset, the channels closed.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sl := s.cur
	s.cur = nil
	close(s.done)
	s.cancel()
	close(s.messages)
	close(s.incoming)
	s.mu.Unlock()
	if sl != nil {
		sl.t.Close(ErrClosed)
	}
	s.wg.Wait()
	return nil
}
