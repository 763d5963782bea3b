package archtest

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// The command line only parses flags, calls the product API (the root
// package gridlink) or the agent's client, and prints: its non-test code
// imports no other package of the module. cliAllowed is that list, as
// paths relative to the module ("" is the root package); a path does not
// cover its subpackages.
var cliAllowed = map[string]string{
	"":              "the product API",
	"agent/control": "the agent's client",
	"status":        "the status schema",
	"dashboard":     "the web view it starts (gridlink dashboard)",
}

// cliViolations returns, for `go list` lines "PKG IMPORT...", every import
// of a module package by cli (or a package under it) that allowed does not
// list.
func cliViolations(lines []string, allowed map[string]string) []string {
	var bad []string
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg != "cli" && !strings.HasPrefix(pkg, "cli/") {
			continue
		}
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if strings.HasPrefix(rel, "cli/") {
				continue // its own subpackages
			}
			if _, ok := allowed[rel]; !ok {
				bad = append(bad, fields[0]+" imports "+imp)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func TestCLIImportsOnlyTheAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/cli/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, v := range cliViolations(strings.Split(strings.TrimSpace(string(out)), "\n"), cliAllowed) {
		t.Errorf("%s: the command line parses flags, calls the gridlink API or the agent's client and prints; move what it needs into the API (allowed: %v)", v, keys(cliAllowed))
	}
}

// The rule on planted packages: the API and the agent's client pass; any
// other module package, a subpackage of an allowed one included, fails;
// packages outside the module and cli's own subpackages pass.
func TestCLIViolations(t *testing.T) {
	allowed := map[string]string{"": "api", "agent": "client"}
	lines := []string{
		module + "/cli fmt github.com/spf13/cobra " + module + " " + module + "/agent " + module + "/cli/internal/words",
		module + "/cli/internal/words strings",
		module + "/vconn " + module + "/hub", // not cli: not its rule
	}
	if got := cliViolations(lines, allowed); len(got) != 0 {
		t.Errorf("allowed imports reported: %v", got)
	}
	planted := append(lines, module+"/cli "+module+"/vconn "+module+"/agent/control "+module+"/hubx", module+"/cli/sub "+module+"/pki")
	got := cliViolations(planted, allowed)
	want := []string{
		module + "/cli imports " + module + "/agent/control",
		module + "/cli imports " + module + "/hubx",
		module + "/cli imports " + module + "/vconn",
		module + "/cli/sub imports " + module + "/pki",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("planted violations: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		if k == "" {
			k = "(root)"
		}
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
