package archtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// DEVELOPERS.md's package table and layer diagram match the tree: every
// package has a row, every row names a package or directory that exists,
// and the diagram lists the layers of this file in their order.

var rowPath = regexp.MustCompile("`([^`]+)`")

// tableRows returns the paths named in the first column of the package
// table ("" for the root package).
func tableRows(md string) map[string]bool {
	rows := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line[1:], "|", 2)[0]
		for _, m := range rowPath.FindAllStringSubmatch(first, -1) {
			p := m[1]
			if p == "gridlink" && strings.Contains(first, "(root)") {
				p = ""
			}
			rows[p] = true
		}
	}
	return rows
}

func TestDevelopersTableMatchesTree(t *testing.T) {
	md, err := os.ReadFile("../../DEVELOPERS.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := tableRows(string(md))
	out, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		pkgs[rel] = true
		if !rows[rel] {
			t.Errorf("package %q has no row in DEVELOPERS.md's package table", rel)
		}
	}
	for p := range rows {
		if pkgs[p] {
			continue
		}
		if fi, err := os.Stat("../../" + p); err != nil || !fi.IsDir() {
			t.Errorf("DEVELOPERS.md's package table names %q, which is neither a package nor a directory", p)
		}
	}
}

// diagramOrder returns the names of the layer diagram's first line in
// order, without the arrows, braces and words in parentheses.
func diagramOrder(md string) []string {
	start := strings.Index(md, "```\n")
	if start < 0 {
		return nil
	}
	line := strings.SplitN(md[start+4:], "\n", 2)[0]
	line = regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(line, "")
	var names []string
	for _, f := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune("→{}, ", r) }) {
		names = append(names, f)
	}
	return names
}

func TestDevelopersDiagramMatchesLayers(t *testing.T) {
	md, err := os.ReadFile("../../DEVELOPERS.md")
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, n := range diagramOrder(string(md)) {
		if n == "gridlink" {
			n = ""
		}
		pos[n] = i
	}
	last, lastName := -1, ""
	for _, l := range layers {
		for _, p := range l {
			if p == "internal/lab" || p == "cmd" || p == "internal" {
				continue // the diagram's second line
			}
			i, ok := pos[p]
			if !ok {
				t.Errorf("layer %q is missing from DEVELOPERS.md's diagram", p)
				continue
			}
			if i < last {
				t.Errorf("DEVELOPERS.md's diagram puts %q before %q; the layers put it after", p, lastName)
			}
		}
		for _, p := range l {
			if i, ok := pos[p]; ok && i > last {
				last, lastName = i, p
			}
		}
	}
}

func TestDiagramParse(t *testing.T) {
	got := strings.Join(diagramOrder("x\n```\na → {b, c} → hub (server `x` | client) → gridlink (API) → {d}\n```\n"), " ")
	if got != "a b c hub gridlink d" {
		t.Errorf("diagramOrder = %q", got)
	}
	rows := tableRows("| `a/b` | x |\n| `gridlink` (root) | y |\n| `c`, `d` | z |\n| path | owns |\n")
	for _, p := range []string{"a/b", "", "c", "d"} {
		if !rows[p] {
			t.Errorf("tableRows misses %q: %v", p, rows)
		}
	}
}
