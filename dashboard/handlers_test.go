package dashboard

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// within is the correctness bound of what the tests wait for through the
// event stream.
const within = 60 * time.Second

// until reads states from ch until cond holds for one, and returns it.
func until(t *testing.T, ch <-chan State, what string, cond func(State) bool) State {
	t.Helper()
	deadline := time.After(within)
	var last State
	for {
		select {
		case st, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended waiting for %s", what)
			}
			if cond(st) {
				return st
			}
			last = st
		case <-deadline:
			t.Fatalf("no state with %s within %v; the last: %+v", what, within, last)
		}
	}
}

func transferOf(st State, id string) (TransferView, bool) {
	for _, v := range st.Transfers {
		if v.ID == id {
			return v, true
		}
	}
	return TransferView{}, false
}

func inState(id, state string) func(State) bool {
	return func(st State) bool {
		v, ok := transferOf(st, id)
		return ok && v.State == state
	}
}

// The state the page gets, as JSON and as events: the agent's status,
// the hub with its nodes on the map (the agent's node marked as the
// user's).
func TestStateAndEvents(t *testing.T) {
	g := newGrid(t)
	c := g.client(t)
	ch := g.events(t, c)
	st := until(t, ch, "the hub and its three nodes", func(st State) bool { return len(st.Overlay.Nodes) == 3 })
	if len(st.Overlay.Hubs) != 1 || st.Overlay.Hubs[0].Name != "site" || !st.Overlay.Hubs[0].Reported || st.Overlay.Hubs[0].Nodes != 3 {
		t.Errorf("hubs %+v; want site, reported, with 3 nodes (the agent's, two services')", st.Overlay.Hubs)
	}
	self := 0
	for _, n := range st.Overlay.Nodes {
		if n.Hub != "site" {
			t.Errorf("node %+v not at site", n)
		}
		if n.Self {
			self++
			if n.Name != "me" {
				t.Errorf("the user's node is %q; want me", n.Name)
			}
		}
	}
	if self != 1 || st.Agent == nil || st.Agent.Node.Name != "me" || st.AgentError != "" {
		t.Errorf("%d nodes marked the user's; agent %+v, error %q", self, st.Agent, st.AgentError)
	}
	if js := g.state(t, c); js.Agent == nil || len(js.Overlay.Hubs) != 1 {
		t.Errorf("GET /api/state: %+v", js)
	}
	// a hub socket without a hub is named on the map, not fatal; so is
	// an agent that is not there
	s, _ := newBare(t)
	s.cfg.Hubs = []string{g.hubSock, "@gridlink-dash-test-no-hub"}
	st = s.state(testCtx)
	if len(st.Overlay.Errors) != 1 || len(st.Overlay.Hubs) != 1 || st.Agent != nil || st.AgentError == "" {
		t.Errorf("a missing hub and agent: %+v, agent error %q", st.Overlay, st.AgentError)
	}
}

// Transfers from the page: a third-party push between two services
// completes with its progress shown; another is paused (its source holds
// its blocks), resumed and completes with the same bytes; a third is
// cancelled along with others in one action, which names what it could
// not do; a get cannot be paused, and says so.
func TestTransfers(t *testing.T) {
	g := newGrid(t)
	c := g.client(t)
	ch := g.events(t, c)
	a := randomFile(t, g.src, "a", 3<<20+17)
	b := randomFile(t, g.src, "b", 8<<20)
	randomFile(t, g.src, "c", 8<<20)
	start := func(req TransferRequest) string {
		t.Helper()
		var res map[string]string
		if code := g.post(t, c, "/api/transfers", req, &res); code != http.StatusOK || res["id"] == "" {
			t.Fatalf("start %+v: %d %v", req, code, res)
		}
		return res["id"]
	}
	act := func(action string, ids ...string) map[string]string {
		t.Helper()
		var res ActionResult
		if code := g.post(t, c, "/api/transfers/action", ActionRequest{Action: action, IDs: ids}, &res); code != http.StatusOK {
			t.Fatalf("%s %v: %d", action, ids, code)
		}
		return res.Results
	}
	same := func(name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(g.dst, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s at the destination: %d bytes, %v; want the source's %d", name, len(got), err, len(want))
		}
	}

	// a push that completes, its progress shown along the way
	id1 := start(TransferRequest{Srcs: []string{"srcsvc:a"}, Dst: "dstsvc:a"})
	st := until(t, ch, "push 1 done", inState(id1, StateDone))
	v, _ := transferOf(st, id1)
	if v.Kind != "push" || v.Bytes != int64(len(a)) || v.TotalBytes != int64(len(a)) || v.Files != 1 || v.Ended.IsZero() || v.Method == "" {
		t.Errorf("push 1 done: %+v", v)
	}
	same("a", a)

	// paused, held, resumed, complete
	id2 := start(TransferRequest{Srcs: []string{"srcsvc:b"}, Dst: "dstsvc:b", LimitBytesPerS: 2 << 20})
	until(t, ch, "push 2 moving", func(st State) bool {
		v, _ := transferOf(st, id2)
		return v.State == StateRunning && v.Bytes > 0
	})
	if r := act("pause", id2); r[id2] != "" {
		t.Fatalf("pause: %v", r)
	}
	until(t, ch, "push 2 paused", inState(id2, StatePaused))
	testwait.Until(t, "the source holding push 2", within, func() bool { return g.srcSvc.Holding() == 1 })
	if _, err := os.Stat(filepath.Join(g.dst, "b")); err == nil {
		t.Errorf("b is stored while its push is held")
	}
	if r := act("resume", id2); r[id2] != "" {
		t.Fatalf("resume: %v", r)
	}
	st = until(t, ch, "push 2 done", inState(id2, StateDone))
	v, _ = transferOf(st, id2)
	if v.Bytes != int64(len(b)) {
		t.Errorf("push 2 done: %+v", v)
	}
	same("b", b)

	// cancelled, with others in one action
	id3 := start(TransferRequest{Srcs: []string{"srcsvc:c"}, Dst: "dstsvc:c", LimitBytesPerS: 1 << 20})
	until(t, ch, "push 3 moving", func(st State) bool {
		v, _ := transferOf(st, id3)
		return v.State == StateRunning && v.Bytes > 0
	})
	r := act("pause", id3, id1)
	if r[id3] != "" || r[id1] != errFinished.Error() {
		t.Errorf("pause push 3 and the ended push 1: %v", r)
	}
	r = act("cancel", id3, "99")
	if r[id3] != "" || r["99"] != errNoTransfer.Error() {
		t.Errorf("cancel push 3 and no transfer: %v", r)
	}
	until(t, ch, "push 3 cancelled", inState(id3, StateCanceled))
	if _, err := os.Stat(filepath.Join(g.dst, "c")); err == nil {
		t.Errorf("c is stored though its push was cancelled")
	}

	// a get: not pausable
	here := t.TempDir()
	id4 := start(TransferRequest{Srcs: []string{"dstsvc:a"}, Dst: here})
	if r := act("pause", id4); r[id4] != errGetNoPause.Error() && r[id4] != errFinished.Error() {
		t.Errorf("pause a get: %v; want %q", r, errGetNoPause)
	}
	st = until(t, ch, "the get done", inState(id4, StateDone))
	if v, _ := transferOf(st, id4); v.Pausable || v.Kind != "get" {
		t.Errorf("the get: %+v", v)
	}
	if got, err := os.ReadFile(filepath.Join(here, "a")); err != nil || !bytes.Equal(got, a) {
		t.Errorf("the get stored %d bytes, %v", len(got), err)
	}

	// bad requests are refused with the reason
	var e errorBody
	if code := g.post(t, c, "/api/transfers", TransferRequest{Srcs: []string{"a"}, Dst: "b"}, &e); code != http.StatusBadRequest || e.Error == "" {
		t.Errorf("a copy with no remote end: %d %q", code, e.Error)
	}
	if code := g.post(t, c, "/api/transfers/action", ActionRequest{Action: "explode", IDs: []string{id1}}, &e); code != http.StatusBadRequest {
		t.Errorf("an unknown action: %d %q", code, e.Error)
	}
	// the history keeps them all, newest first
	st = g.state(t, c)
	if len(st.Transfers) != 4 || st.Transfers[0].ID != id4 || st.Transfers[3].ID != id1 {
		t.Errorf("history: %+v", st.Transfers)
	}
}
