package dashboard

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Live updates: the dashboard pushes its whole state (State, JSON) to
// every open page as server-sent events, every Config.Interval and at
// once after a change the page asked for:
//
//	event: state
//	data: {"time":...,"agent":...,"overlay":...,"transfers":[...]}
//
// followed by a blank line. A page that reads slowly misses states, never
// gets old ones late: each subscriber holds the newest only.
//
// A member's stream is checked again whenever the grid's trust takes a
// new revocation list, and when its chain expires; if the member is no
// longer admitted, the stream
// ends with the reason, which the dashboard logs in the same words:
//
//	event: refused
//	data: dashboard: refused: certificate revoked (...)

// broker hands the newest state to every subscriber.
type broker struct {
	mu     sync.Mutex
	subs   map[chan []byte]bool
	kicks  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newBroker() *broker {
	return &broker{subs: map[chan []byte]bool{}, kicks: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (b *broker) subscribe() chan []byte {
	ch := make(chan []byte, 1)
	b.mu.Lock()
	b.subs[ch] = true
	b.mu.Unlock()
	b.kick()
	return ch
}

func (b *broker) unsubscribe(ch chan []byte) {
	b.mu.Lock()
	delete(b.subs, ch)
	b.mu.Unlock()
}

func (b *broker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// send gives every subscriber msg, replacing one it has not taken yet.
func (b *broker) send(msg []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case <-ch:
		default:
		}
		ch <- msg
	}
}

// kick asks for a state now.
func (b *broker) kick() {
	select {
	case b.kicks <- struct{}{}:
	default:
	}
}

func (b *broker) close() { b.once.Do(func() { close(b.closed) }) }

// publish sends the state to the subscribers every interval and when
// kicked, while there are any, until the dashboard stops.
func (s *Server) publish() {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		case <-s.events.kicks:
		}
		if s.events.count() == 0 {
			continue
		}
		msg, err := eventOf(s.state(s.ctx))
		if err != nil {
			s.log.Error("dashboard: state", "err", err)
			continue
		}
		s.events.send(msg)
	}
}

// stream serves GET /events: the state as server-sent events until the
// page goes or the dashboard stops.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("dashboard: this connection cannot stream events"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	ch := s.events.subscribe()
	defer s.events.unsubscribe(ch)
	var changed <-chan struct{}
	var expires <-chan time.Time
	who := memberOf(r.Context())
	if who != nil {
		changed = s.members.trust.Changed()
		t := time.NewTimer(time.Until(who.chain.NotAfter) + time.Second)
		defer t.Stop()
		expires = t.C
		if s.memberGone(w, r, who) { // a list taken since the request was admitted
			return
		}
	}
	for {
		select {
		case <-changed:
			changed = s.members.trust.Changed()
			if s.memberGone(w, r, who) {
				fl.Flush()
				return
			}
		case <-expires:
			s.memberGone(w, r, who) // expired: refused
			fl.Flush()
			return
		case msg := <-ch:
			if _, err := w.Write(msg); err != nil {
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			return
		case <-s.events.closed:
			return
		}
	}
}

// memberGone checks a member's chain again; if it is refused now, it logs
// why and tells the page in a last event.
func (s *Server) memberGone(w http.ResponseWriter, r *http.Request, who *member) bool {
	_, ref := s.members.check(who.certs)
	if ref == nil {
		return false
	}
	s.log.Warn("dashboard: refused", "reason", ref.Reason, "detail", ref.Detail, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	fmt.Fprintf(w, "event: refused\ndata: %s\n\n", strings.ReplaceAll(ref.Error(), "\n", " "))
	return true
}
