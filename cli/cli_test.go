package cli

import (
	"strings"
	"testing"
)

func TestParsePorts(t *testing.T) {
	if pr, err := parsePorts("40000-40100"); err != nil || pr.Lo != 40000 || pr.Hi != 40100 {
		t.Errorf("range: %+v %v", pr, err)
	}
	if pr, err := parsePorts("7000"); err != nil || pr.Lo != 7000 || pr.Hi != 7000 {
		t.Errorf("single: %+v %v", pr, err)
	}
	if pr, err := parsePorts(""); err != nil || pr.Lo != 0 {
		t.Errorf("empty: %+v %v", pr, err)
	}
	for _, bad := range []string{"0", "5-4", "a-b", "70000", "1-"} {
		if _, err := parsePorts(bad); err == nil || !strings.Contains(err.Error(), "--ports") {
			t.Errorf("parsePorts(%q): %v", bad, err)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	ps, err := parsePrefixes("--prefer", []string{"10.2.0.0/24", "192.168.0.0/16"})
	if err != nil || len(ps) != 2 || ps[0].String() != "10.2.0.0/24" {
		t.Errorf("%v %v", ps, err)
	}
	if _, err := parsePrefixes("--prefer", []string{"10.2.0.0"}); err == nil || !strings.Contains(err.Error(), "--prefer") {
		t.Errorf("bad prefix: %v", err)
	}
}

// Every command has help text and a short description.
func TestCommands(t *testing.T) {
	var names []string
	for _, c := range Root().Commands() {
		names = append(names, c.Name())
		if c.Short == "" {
			t.Errorf("command %s has no description", c.Name())
		}
	}
	for _, want := range []string{"hub", "node", "ping", "status", "doctor", "perf", "version"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("no %s command in %v", want, names)
		}
	}
}
