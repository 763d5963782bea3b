package hubserver

import (
	"testing"

	"github.com/gridlink/gridlink/status"
)

// refusals is how many refusals of what for reason h counted.
func refusals(t *testing.T, h *Hub, what, reason string) uint64 {
	t.Helper()
	for _, r := range h.Counters().Refusals {
		if r.What == what && r.Reason == reason {
			return r.Count
		}
	}
	t.Fatalf("hub %s counts no %s refusals for %q", h.Name(), what, reason)
	return 0
}

// wantRefused fails unless h counted at least one refusal of what for
// reason.
func wantRefused(t *testing.T, h *Hub, what, reason string) {
	t.Helper()
	if n := refusals(t, h, what, reason); n == 0 {
		t.Errorf("hub %s counted no %s refusal for %q", h.Name(), what, reason)
	}
}

// Every refusal reason is reported, in the order counted, zero or not; a
// hub configured without counters reports zeros.
func TestCountersListEveryReason(t *testing.T) {
	h, err := New(Config{Name: "n", Creds: creds(t), Listen: "127.0.0.1:0", NoCounters: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.ln.Close()
	h.counts.refuse(refNoRoute)
	h.counts.switched(100)
	c := h.Counters()
	if len(c.Refusals) != len(refusalKinds) || c.SwitchedBytes != 0 || c.Refusals[refNoRoute].Count != 0 {
		t.Errorf("a hub without counters: %+v", c)
	}
	if c.Refusals[refNoRoute].Reason != status.RefusedNoRoute || c.Refusals[refShed].What != "connection" {
		t.Errorf("refusal kinds out of order: %+v", c.Refusals)
	}
}
