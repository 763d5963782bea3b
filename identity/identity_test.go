package identity

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestIDText(t *testing.T) {
	k := KeyFromSeed(make([]byte, 32))
	id := k.ID()
	s := id.String()
	if len(s) != 52 || strings.ToLower(s) != s || id.Short() != s[:10] {
		t.Fatalf("ID text %q", s)
	}
	back, err := ParseID(s)
	if err != nil || back != id {
		t.Fatalf("ParseID(%q) = %v, %v", s, back, err)
	}
	for _, bad := range []string{"", "abc", s[:51] + "!", s + "a"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
	if strings.Contains(k.String(), string(k.Private())) || !strings.Contains(k.String(), id.Short()) {
		t.Errorf("Key.String = %q", k.String())
	}
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "node.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || k2.ID() != k1.ID() {
		t.Fatalf("reload: %v, %v vs %v", err, k2.ID(), k1.ID())
	}
}

func TestParseAddr(t *testing.T) {
	id := KeyFromSeed(make([]byte, 32)).ID().String()
	good := map[string]Addr{
		"das3v-n1:7000":       {Node: "das3v-n1", Port: 7000},
		"das3v-n1:http@das3v": {Node: "das3v-n1", Service: "http", Hub: "das3v"},
		"192.0.2.11:22":       {Node: "192.0.2.11", Port: 22},
		"[2001:db8::1]:80":    {Node: "2001:db8::1", Port: 80},
		"pc":                  {Node: "pc"},
		id + ":5":             {Node: id, Port: 5},
	}
	for in, want := range good {
		got, err := ParseAddr(in)
		if err != nil || got != want {
			t.Errorf("ParseAddr(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if got.String() != in {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	for _, bad := range []string{"", ":80", "a:0", "a:70000", "a:-1", "a b:1", "a:1@", "[::1", "a:_x", "[nothost]:1"} {
		if _, err := ParseAddr(bad); err == nil {
			t.Errorf("ParseAddr(%q) accepted", bad)
		}
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"das3v-n1:7000", "x:http@hub", "[::1]:1", "1.2.3.4:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			return
		}
		b, err := ParseAddr(a.String())
		if err != nil || b != a {
			t.Fatalf("round trip %q -> %q -> %+v, %v", s, a.String(), b, err)
		}
	})
}
