package identity

import (
	"errors"
	"strings"
	"testing"
)

// The names every role may take, and the ones refused (issue 32): what
// rewrites a terminal, shadows NAME.grid, an ID or another name.
func TestCheckName(t *testing.T) {
	id := KeyFromSeed(make([]byte, 32)).ID().String()
	for _, good := range []string{"das3v-n1", "g5k-n1", "hiroshi-fe", "SRVHOME", "n1", "a", "h_1", "7", strings.Repeat("x", MaxName), id[:51]} {
		if err := CheckName(good); err != nil {
			t.Errorf("CheckName(%q): %v", good, err)
		}
	}
	for _, bad := range []string{"", "c.grid", "das3v-n1.grid", "a b", "\x1b[2J", "n1\n", "alice@vu", "n1:22", "-x", "_x",
		"ñ", "p\u0430ypal", "a;rm", "$(id)", strings.Repeat("x", MaxName+1), strings.Repeat("x", 300), id, strings.ToUpper(id), "198.51.100.1"} {
		err := CheckName(bad)
		var ne *NameError
		if !errors.Is(err, ErrBadName) || !errors.As(err, &ne) {
			t.Errorf("CheckName(%q) = %v, want a *NameError", bad, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x1b\n") || !strings.Contains(err.Error(), "--name") {
			t.Errorf("CheckName(%q)'s words: %q", bad, err)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"das3v-n1":     "das3v-n1",
		"":             "",
		"\x1b[2Jowned": `"\x1b[2Jowned"`,
		"a b":          `"a b"`,
		"p\u0430ypal":  `"p\u0430ypal"`,
		`a"b`:          `"a\"b"`,
		"x\ny":         `"x\ny"`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
	m := Machine{Name: "\x1b[2J", HubName: "h\x07"}
	if s := m.String(); strings.ContainsAny(s, "\x1b\x07") {
		t.Errorf("Machine.String() = %q", s)
	}
}

func TestPrintableLine(t *testing.T) {
	for in, want := range map[string]string{
		"refused: a b":              "refused: a b",
		"x\x1b[2Jy\nz":              `x\x1b[2Jy\nz`,
		"p\u0430ypal \"quote\" 5µs": "p\u0430ypal \"quote\" 5µs",
		"over\u202eride":            `over\u202eride`,
		"bad\xffbyte":               `bad\xffbyte`,
	} {
		if got := PrintableLine(in); got != want {
			t.Errorf("PrintableLine(%q) = %s, want %s", in, got, want)
		}
	}
}
