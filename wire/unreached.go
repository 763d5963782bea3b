package wire

import (
	"fmt"

	"github.com/gridlink/gridlink/identity"
)

// A lookup's answer names the hubs that could not be asked (issue 23): a
// hub answering its node's KLookup or KLookupAddr with no match says how
// many hubs searched (itself included) and which hubs it could not ask,
// so that "not found" during a partition says that the node's hub may be
// among those:
//
//	hub → node, on its link, never routed:
//	  KFound  {"query":Q,"answered":3,"unreached":[
//	           {"hub":…,"name":"das3v","cause":"unreachable","since_ms":1795654923000},
//	           {"hub":…,"name":"hiroshi","cause":"no-answer","wait_ms":2000}]}
//
// Cause is UnreachedRoute (no route in the hub's table; SinceMs, Unix
// milliseconds, when it was lost, 0 when unknown) or UnreachedNoAnswer
// (asked, no answer within WaitMs milliseconds). At most maxUnreached are
// listed (Answered still counts all that answered). Hubs of Version
// VersionUnreached or later send these fields, and only to a node whose
// hello carries that version or later (StripUnreached): decoders are
// strict, an older node would close its link over an unknown field. An
// answer from an older hub simply lacks them (Answered 0: unknown).
const (
	// VersionUnreached is the first protocol version (Hello.Version)
	// whose hubs fill Found.Answered and Found.Unreached.
	VersionUnreached = 4

	// UnreachedRoute: the hub had no route to that hub.
	UnreachedRoute = "unreachable"
	// UnreachedNoAnswer: the hub asked, no answer came in time.
	UnreachedNoAnswer = "no-answer"

	// maxUnreached bounds Found.Unreached.
	maxUnreached = 64
	// MaxUnreached is maxUnreached for the hubs that fill the list.
	MaxUnreached = maxUnreached
)

// HubUnreached is one hub a lookup could not ask.
type HubUnreached struct {
	Hub     identity.ID `json:"hub"`
	Name    string      `json:"name,omitempty"`
	Cause   string      `json:"cause"`
	SinceMs int64       `json:"since_ms,omitempty"` // UnreachedRoute: when lost (Unix ms)
	WaitMs  int64       `json:"wait_ms,omitempty"`  // UnreachedNoAnswer: how long it waited
}

func (f *Found) checkUnreached() error {
	if f.Answered < 0 || f.Answered > maxRoutes+1 {
		return fmt.Errorf("found: %d hubs answered, want 0 to %d", f.Answered, maxRoutes+1)
	}
	if len(f.Unreached) > maxUnreached {
		return fmt.Errorf("found: %d unreached hubs, want at most %d", len(f.Unreached), maxUnreached)
	}
	for _, u := range f.Unreached {
		if u.Hub.IsZero() || len(u.Name) > maxName || u.SinceMs < 0 || u.WaitMs < 0 {
			return fmt.Errorf("found: bad unreached hub %q", u.Name)
		}
		if u.Cause != UnreachedRoute && u.Cause != UnreachedNoAnswer {
			return fmt.Errorf("found: unreached hub %q: unknown cause %q", u.Name, u.Cause)
		}
	}
	return nil
}

// StripUnreached returns m as a peer of protocol version v may decode it:
// for v before VersionUnreached, a copy of a KFound without Answered and
// Unreached; otherwise m itself.
func StripUnreached(m *Message, v int) *Message {
	if v >= VersionUnreached || m == nil || m.Kind != KFound || m.Found == nil || m.Found.Answered == 0 && len(m.Found.Unreached) == 0 {
		return m
	}
	f := *m.Found
	f.Answered, f.Unreached = 0, nil
	c := *m
	c.Found = &f
	return &c
}
