package wire

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

func unreachedFound() *Message {
	id := testMachine().ID
	return &Message{Kind: KFound, Found: &Found{Query: 9, Answered: 3, Unreached: []HubUnreached{
		{Hub: id, Name: "das3v", Cause: UnreachedRoute, SinceMs: 1795654923000},
		{Hub: id, Name: "hiroshi", Cause: UnreachedNoAnswer, WaitMs: 2000},
	}}}
}

// A KFound naming the hubs it could not ask decodes as sent; malformed
// ones (too many, unknown cause, no hub, long name, negative counts) are
// refused.
func TestFoundUnreached(t *testing.T) {
	m := unreachedFound()
	got, err := Decode(Encode(m))
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if !bytes.Contains(Encode(m), []byte(`"cause":"no-answer","wait_ms":2000`)) {
		t.Errorf("encoding %s", Encode(m))
	}
	bad := map[string]func(f *Found){
		"too many":       func(f *Found) { f.Unreached = make([]HubUnreached, maxUnreached+1) },
		"unknown cause":  func(f *Found) { f.Unreached[0].Cause = "gone" },
		"no cause":       func(f *Found) { f.Unreached[0].Cause = "" },
		"zero hub":       func(f *Found) { f.Unreached[1].Hub = identity.ID{} },
		"long name":      func(f *Found) { f.Unreached[0].Name = strings.Repeat("n", maxName+1) },
		"negative since": func(f *Found) { f.Unreached[0].SinceMs = -1 },
		"negative wait":  func(f *Found) { f.Unreached[1].WaitMs = -1 },
		"negative count": func(f *Found) { f.Answered = -1 },
		"huge count":     func(f *Found) { f.Answered = maxRoutes + 2 },
	}
	for name, spoil := range bad {
		b := unreachedFound()
		spoil(b.Found)
		if _, err := Decode(Encode(b)); err == nil {
			t.Errorf("%s: decoded %s", name, Encode(b))
		}
	}
	full := unreachedFound()
	full.Found.Unreached = make([]HubUnreached, maxUnreached)
	for i := range full.Found.Unreached {
		full.Found.Unreached[i] = HubUnreached{Hub: testMachine().ID, Cause: UnreachedRoute}
	}
	if _, err := Decode(Encode(full)); err != nil {
		t.Errorf("%d unreached hubs: %v", maxUnreached, err)
	}
}

// An older node's strict decoder refuses the unknown fields: StripUnreached
// leaves them out of what it gets, without touching the message sent to a
// newer one; a version 3 decoder takes the stripped answer.
func TestStripUnreached(t *testing.T) {
	m := unreachedFound()
	if StripUnreached(m, VersionUnreached) != m {
		t.Error("changed for a node of VersionUnreached")
	}
	old := StripUnreached(m, VersionUnreached-1)
	if old.Found.Answered != 0 || old.Found.Unreached != nil || old.Found.Query != 9 || len(m.Found.Unreached) != 2 {
		t.Errorf("stripped %+v, original %+v", old.Found, m.Found)
	}
	plain := &Message{Kind: KFound, Found: &Found{Query: 1}}
	if StripUnreached(plain, 1) != plain {
		t.Error("a message without the fields was copied")
	}
	type oldFound struct {
		Kind  string `json:"kind"`
		Found struct {
			Query   uint64             `json:"query"`
			Matches []identity.Machine `json:"matches,omitempty"`
		} `json:"found"`
	}
	var o oldFound
	if err := strictUnmarshal(Encode(m), &o); err == nil {
		t.Error("a version 3 decoder took the new fields: the test shows nothing")
	}
	if err := strictUnmarshal(Encode(old), &o); err != nil || o.Found.Query != 9 {
		t.Errorf("a version 3 decoder on the stripped answer: %v", err)
	}
}
