package proxy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
)

func testID(t *testing.T) identity.ID {
	t.Helper()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

func TestEntryForm(t *testing.T) {
	b := testID(t)
	for _, e := range []string{"echo", "port-2811", Entry("port-2811", b), strings.Repeat("a", 32) + "@" + b.String()} {
		if err := CheckEntry(e); err != nil {
			t.Errorf("%q: %v", e, err)
		}
	}
	if Entry("echo", identity.ID{}) != "echo" {
		t.Errorf("an entry for no node names a node: %q", Entry("echo", identity.ID{}))
	}
	for _, e := range []string{
		"", "@" + b.String(), "port-2811@", "port-2811@" + strings.ToUpper(b.String()),
		"port-2811@" + b.String()[:51], "port-2811@" + b.String() + "a", "port-2811@" + b.String() + "@" + b.String(),
		"port-2811@" + (identity.ID{}).String(), "1x@" + b.String(), "a b", strings.Repeat("a", 33),
	} {
		if err := CheckEntry(e); err == nil {
			t.Errorf("%q accepted", e)
		}
	}
	// A non-canonical ID (its last character's unused bits set) is refused:
	// one text per node.
	s := b.String()
	last := strings.IndexByte("abcdefghijklmnopqrstuvwxyz234567", s[51])
	if last%2 == 0 { // 256 bits in 52×5: the last character's low 4 bits are padding
		alt := s[:51] + string("abcdefghijklmnopqrstuvwxyz234567"[last+1])
		if err := CheckEntry("x@" + alt); err == nil {
			t.Errorf("non-canonical ID %s accepted", alt)
		}
	}
}

// A restriction narrows: a targeted entry is within the plain one of its
// service, never the reverse; Permits honours the node; Intersect keeps
// the narrower of each pair.
func TestRestrictionRules(t *testing.T) {
	b, c := testID(t), testID(t)
	atB, atC := Entry("port-2811", b), Entry("port-2811", c)
	for _, tc := range []struct {
		a, b []string
		want bool
	}{
		{[]string{atB}, []string{"port-2811"}, true},
		{[]string{"port-2811"}, []string{atB}, false},
		{[]string{atB}, []string{atB}, true},
		{[]string{atC}, []string{atB}, false},
		{[]string{atB}, []string{"echo"}, false},
		{[]string{"echo", atB}, []string{"echo", "port-2811"}, true},
	} {
		if got := Subset(tc.a, tc.b); got != tc.want {
			t.Errorf("Subset(%v, %v) = %v", tc.a, tc.b, got)
		}
	}
	r := []string{"echo", atB}
	for _, tc := range []struct {
		svc  string
		node identity.ID
		want bool
	}{{"port-2811", b, true}, {"port-2811", c, false}, {"echo", c, true}, {"port-22", b, false}} {
		if got := Permits(r, tc.svc, tc.node); got != tc.want {
			t.Errorf("Permits(%v, %s, %s) = %v", r, tc.svc, tc.node.Short(), got)
		}
	}
	if !Permits(nil, "anything", c) || !ReachesNode(nil, c) || !ReachesNode(r, c) || ReachesNode([]string{atB}, c) || !ReachesNode([]string{atB}, b) {
		t.Error("ReachesNode or Permits of no restriction")
	}
	if got := Intersect([]string{"port-2811"}, []string{atB, "echo"}); !slices.Equal(got, []string{atB}) {
		t.Errorf("Intersect: %v", got)
	}
	if got := Intersect([]string{atC}, []string{atB}); len(got) != 0 {
		t.Errorf("Intersect of two nodes: %v", got)
	}
}

// A child proxy cannot widen a targeted restriction to the service
// anywhere; the targeted form round-trips through the extension and the
// delegation request.
func TestTargetedProxies(t *testing.T) {
	b := testID(t)
	atB := Entry("port-2811", b)
	in := Info{Policy: Restricted, Services: []string{"echo", atB}}
	der, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ParseInfo(der); err != nil || !slices.Equal(out.Services, in.Services) {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	user := setup(t).alice
	p, err := New(user, Options{Restrict: []string{atB}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(p, Options{Restrict: []string{"port-2811"}}); err == nil || !strings.Contains(err.Error(), "wider") {
		t.Errorf("a plain child of a targeted proxy: %v", err)
	}
	pending, req, err := NewRequest(time.Hour, []string{atB})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRequest(req)
	if err != nil || !slices.Equal(r.Restrict, []string{atB}) {
		t.Fatalf("request: %+v %v", r, err)
	}
	// The delegator grants port-2811 anywhere; the request narrows to b.
	answer, err := Delegate(user, r, Options{Restrict: []string{"port-2811"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pending.Accept(answer)
	if err != nil {
		t.Fatal(err)
	}
	if info, _, _ := Of(got.Leaf()); !slices.Equal(info.Services, []string{atB}) {
		t.Errorf("delegated restriction %v, want [%s]", info.Services, atB)
	}
}

func TestLifetimeBounds(t *testing.T) {
	user := setup(t).alice
	for _, o := range []Options{{Lifetime: -time.Hour}, {Lifetime: DefaultMaxLifetime + time.Second}, {Lifetime: 2 * time.Hour, MaxLifetime: time.Hour}} {
		if p, err := New(user, o); err == nil {
			t.Errorf("%+v: made a proxy valid %v", o, p.Leaf().NotAfter.Sub(p.Leaf().NotBefore))
		}
	}
	p, err := New(user, Options{Lifetime: DefaultMaxLifetime})
	if err != nil {
		t.Fatal(err)
	}
	if life := p.Leaf().NotAfter.Sub(p.Leaf().NotBefore); life > DefaultMaxLifetime {
		t.Errorf("a proxy of the longest lifetime is valid %v, beyond %v", life, DefaultMaxLifetime)
	}
	if _, err := New(user, Options{Lifetime: 30 * 24 * time.Hour, MaxLifetime: -1}); err != nil {
		t.Errorf("no maximum: %v", err)
	}
}
