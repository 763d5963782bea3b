package dashboard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gridlink/gridlink"
)

// Transfers started from the page run in the dashboard's process as the
// signed-on user: each is a gridlink.Copy with a node of its own (the
// user's credentials, Config.Node; with her proxy, an identity of its
// own, a proxy of that proxy, so transfers run at once beside her
// agent), a push delegating the user's proxy (Config.ProxyFile) to the
// source service, as `gridlink cp` does. A transfer is paused and
// resumed by its CopyHold (the sender holds its blocks), cancelled by its
// context; the finished ones stay in the history (Config.History of
// them).

// Transfer states (TransferView.State).
const (
	StateStarting = "starting" // its node is starting, or the delegation runs
	StateRunning  = "running"
	StatePaused   = "paused"
	StateDone     = "done"
	StateFailed   = "failed"
	StateCanceled = "canceled"
)

// TransferRequest is a transfer the page asks for: scp's arguments
// (gridlink.PlanCopy), NAME:PATH on a transfer service.
type TransferRequest struct {
	Srcs      []string `json:"srcs"`
	Dst       string   `json:"dst"`
	Recursive bool     `json:"recursive"`
	// LimitBytesPerS bounds the file data rate (0: none).
	LimitBytesPerS int64 `json:"limit_bytes_per_s"`
}

// TransferView is a transfer as the page shows it.
type TransferView struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"` // put, get or push (third-party)
	Srcs       []string  `json:"srcs"`
	Dst        string    `json:"dst"`
	State      string    `json:"state"`
	Bytes      int64     `json:"bytes"`
	TotalBytes int64     `json:"total_bytes"`
	Files      int64     `json:"files"`
	TotalFiles int64     `json:"total_files"`
	RateBPS    float64   `json:"rate_bytes_per_s"` // over the last gridlink.RateWindow while running, the average once done; 0 while unknown or paused
	ETAS       float64   `json:"eta_s"`            // seconds left at that rate; -1 unknown
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	Method     string    `json:"method,omitempty"` // the link's setup method, once it ended
	Pausable   bool      `json:"pausable"`         // a get is not
	Error      string    `json:"error,omitempty"`
}

// ActionRequest acts on transfers: pause, resume or cancel, by ID.
type ActionRequest struct {
	Action string   `json:"action"`
	IDs    []string `json:"ids"`
}

// ActionResult is what an action did to each transfer: "" for done, else
// why not.
type ActionResult struct {
	Results map[string]string `json:"results"`
}

// copyFunc runs a copy (gridlink.Copy).
type copyFunc func(context.Context, gridlink.CopyConfig, gridlink.CopyPlan) (gridlink.CopyResult, error)

type transfer struct {
	id     string
	req    TransferRequest
	plan   gridlink.CopyPlan
	meter  *gridlink.CopyMeter
	hold   *gridlink.CopyHold // nil for a get
	cancel context.CancelFunc

	mu       sync.Mutex
	state    string
	started  time.Time
	ended    time.Time
	err      string
	method   string
	canceled bool
}

// transfers are the dashboard's transfers, running and finished.
type transfers struct {
	base    gridlink.CopyConfig // Node, ProxyFile, Port, Link of every copy
	copy    copyFunc
	history int

	mu    sync.Mutex
	next  int
	all   map[string]*transfer
	ended []*transfer // the history, oldest first
	ctx   context.Context
	wg    sync.WaitGroup
}

func newTransfers(ctx context.Context, base gridlink.CopyConfig, history int, cp copyFunc) *transfers {
	return &transfers{base: base, copy: cp, history: history, all: map[string]*transfer{}, ctx: ctx}
}

// start plans and starts a transfer.
func (ts *transfers) start(req TransferRequest) (string, error) {
	plan, err := gridlink.PlanCopy(req.Srcs, req.Dst)
	if err != nil {
		return "", err
	}
	if req.LimitBytesPerS < 0 {
		return "", fmt.Errorf("a negative rate limit (%d bytes/s)", req.LimitBytesPerS)
	}
	ts.mu.Lock()
	ts.next++
	id := strconv.Itoa(ts.next)
	ctx, cancel := context.WithCancel(ts.ctx)
	t := &transfer{id: id, req: req, plan: plan, meter: gridlink.NewCopyMeter(), cancel: cancel, state: StateStarting, started: time.Now()}
	if plan.Kind != gridlink.CopyGet {
		t.hold = new(gridlink.CopyHold)
	}
	ts.all[id] = t
	ts.wg.Add(1)
	ts.mu.Unlock()

	cc := ts.base
	cc.Node.Name = fmt.Sprintf("%s-t%s", cc.Node.Name, id)
	cc.Recursive, cc.Limit, cc.Hold = req.Recursive, req.LimitBytesPerS, t.hold
	cc.Progress = func(e gridlink.CopyEvent) {
		if _, ok := e.(gridlink.CopyStarted); ok {
			t.mu.Lock()
			if t.state == StateStarting {
				t.state = StateRunning
				if t.hold != nil && t.hold.Paused() {
					t.state = StatePaused
				}
			}
			t.mu.Unlock()
		}
		t.meter.Add(e)
	}
	go func() {
		defer ts.wg.Done()
		defer cancel()
		res, err := ts.copy(ctx, cc, plan)
		t.mu.Lock()
		t.ended, t.method = time.Now(), res.Method
		switch {
		case t.canceled:
			t.state = StateCanceled
		case err != nil:
			t.state, t.err = StateFailed, err.Error()
		default:
			t.state = StateDone
		}
		t.mu.Unlock()
		ts.finish(t)
	}()
	return id, nil
}

// finish puts t, which ended, in the history, and forgets the oldest
// ended transfers beyond its length.
func (ts *transfers) finish(t *transfer) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.ended = append(ts.ended, t)
	for len(ts.ended) > ts.history {
		delete(ts.all, ts.ended[0].id)
		ts.ended = ts.ended[1:]
	}
}

// finished says whether t ended; the caller holds t.mu.
func (t *transfer) finished() bool { return !t.ended.IsZero() }

// Why an action cannot be done to a transfer (ActionResult.Results).
var (
	errNoTransfer = errors.New("no such transfer")
	errFinished   = errors.New("it has ended")
	errGetNoPause = errors.New("a get cannot be paused (the service sends it): cancel it instead")
)

// act pauses, resumes or cancels the transfers ids.
func (ts *transfers) act(a ActionRequest) (ActionResult, error) {
	switch a.Action {
	case "pause", "resume", "cancel":
	default:
		return ActionResult{}, fmt.Errorf("no such action %q: want pause, resume or cancel", a.Action)
	}
	res := ActionResult{Results: map[string]string{}}
	for _, id := range a.IDs {
		ts.mu.Lock()
		t := ts.all[id]
		ts.mu.Unlock()
		if t == nil {
			res.Results[id] = errNoTransfer.Error()
			continue
		}
		if err := t.act(a.Action); err != nil {
			res.Results[id] = err.Error()
		} else {
			res.Results[id] = ""
		}
	}
	return res, nil
}

func (t *transfer) act(action string) error {
	t.mu.Lock()
	if t.finished() {
		t.mu.Unlock()
		return errFinished
	}
	switch action {
	case "pause", "resume":
		if t.hold == nil {
			t.mu.Unlock()
			return errGetNoPause
		}
		if action == "pause" {
			t.hold.Pause()
			if t.state == StateRunning {
				t.state = StatePaused
			}
		} else {
			t.hold.Resume()
			if t.state == StatePaused {
				t.state = StateRunning
			}
		}
		t.mu.Unlock()
	case "cancel":
		t.canceled = true
		t.mu.Unlock()
		t.cancel()
	}
	return nil
}

// list is every transfer, newest first.
func (ts *transfers) list(now time.Time) []TransferView {
	ts.mu.Lock()
	all := make([]*transfer, 0, len(ts.all))
	for _, t := range ts.all {
		all = append(all, t)
	}
	ts.mu.Unlock()
	out := make([]TransferView, 0, len(all))
	for _, t := range all {
		out = append(out, t.view(now))
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].ID)
		b, _ := strconv.Atoi(out[j].ID)
		return a > b
	})
	return out
}

func (t *transfer) view(now time.Time) TransferView {
	st := t.meter.Status(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	v := TransferView{ID: t.id, Kind: kindName(t.plan.Kind), Srcs: t.req.Srcs, Dst: t.req.Dst, State: t.state,
		Bytes: st.Bytes, TotalBytes: st.TotalBytes, Files: st.Files, TotalFiles: st.TotalFiles, ETAS: -1,
		Started: t.started, Ended: t.ended, Method: t.method, Pausable: t.hold != nil, Error: t.err}
	if st.HasRate && t.state == StateRunning {
		v.RateBPS = st.Rate
	}
	if st.HasETA && t.state == StateRunning {
		v.ETAS = st.ETA.Seconds()
	}
	if t.state == StateDone {
		v.ETAS = 0
		if d := t.ended.Sub(t.started).Seconds(); d > 0 {
			v.RateBPS = float64(st.Bytes) / d // the average, for the history
		}
	}
	return v
}

func kindName(k gridlink.CopyKind) string {
	switch k {
	case gridlink.CopyPut:
		return "put"
	case gridlink.CopyGet:
		return "get"
	case gridlink.CopyPush:
		return "push"
	}
	return "?"
}

// close cancels every running transfer and waits for them.
func (ts *transfers) close() {
	ts.mu.Lock()
	for _, t := range ts.all {
		t.cancel()
	}
	ts.mu.Unlock()
	ts.wg.Wait()
}
