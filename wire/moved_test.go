package wire

import (
	"strings"
	"testing"
)

// A moved message names the hub the node moved to, travels only on the
// node's own link, and carries nothing else.
func TestMovedMessage(t *testing.T) {
	m := testMachine()
	good := &Message{Kind: KMoved, Moved: &Moved{To: m.ID}}
	got, err := Decode(Encode(good))
	if err != nil || got.Moved == nil || got.Moved.To != m.ID {
		t.Fatalf("decode: %+v %v", got, err)
	}
	for _, c := range []struct {
		name string
		m    *Message
		want string
	}{
		{"no hub", &Message{Kind: KMoved, Moved: &Moved{}}, "names no hub"},
		{"no body", &Message{Kind: KMoved}, "0 bodies"},
		{"two bodies", &Message{Kind: KMoved, Moved: &Moved{To: m.ID}, Machine: &m}, "2 bodies"},
		{"routed", &Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: good}}, "cannot route a moved message"},
	} {
		if _, err := Decode(Encode(c.m)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.want)
		}
	}
}
