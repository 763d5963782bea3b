package wire

import (
	"strings"
	"testing"
)

// A hello's process instance decodes only as a node's, of InstanceSize
// lowercase hex digits.
func TestHelloInstance(t *testing.T) {
	m := testMachine()
	good := "0123456789abcdef0123456789abcdef"
	msg, err := Decode(Encode(&Message{Kind: KHello, Hello: &Hello{Role: "node", Machine: m, Version: VersionInstance, Instance: good}}))
	if err != nil || msg.Hello.Instance != good {
		t.Fatalf("decode: %v, %+v", err, msg)
	}
	for _, c := range []struct {
		h    Hello
		want string
	}{
		{Hello{Role: "hub", Machine: m, Version: VersionInstance, Instance: good}, "only nodes"},
		{Hello{Role: "node", Machine: m, Version: VersionInstance, Instance: good[1:]}, "31 characters"},
		{Hello{Role: "node", Machine: m, Version: VersionInstance, Instance: strings.ToUpper(good)}, "not lowercase hex"},
		{Hello{Role: "node", Machine: m, Version: VersionInstance, Instance: good[:31] + "g"}, "not lowercase hex"},
	} {
		if _, err := Decode(Encode(&Message{Kind: KHello, Hello: &c.h})); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("hello %+v: %v, want an error with %q", c.h, err, c.want)
		}
	}
}
