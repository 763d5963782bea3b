package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var updateExamples = flag.Bool("update", false, "write examples/*.conf again from the flags")

// rootCommand is Root's subcommand name.
func rootCommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	for _, c := range Root().Commands() {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no gridlink %s", name)
	return nil
}

// withDefaultsSet uncomments every "#name VALUE" line of text whose value
// is the flag's default.
func withDefaultsSet(c *cobra.Command, text string) string {
	c.InheritedFlags()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		name, value, ok := strings.Cut(strings.TrimPrefix(l, "#"), " ")
		if fl := c.Flags().Lookup(name); ok && l != name+" "+value && fl != nil && defaultValue(fl) == value {
			lines[i] = name + " " + value
		}
	}
	return strings.Join(lines, "\n")
}

// The example configs in examples/ are the flags' as they are now (every
// flag, its help and its default), and the config reader takes them: as
// written, and with every commented-out setting set.
func TestExampleConfigs(t *testing.T) {
	for _, ex := range exampleConfigs {
		file := filepath.Join("..", "examples", ex.command+".conf")
		got := exampleConfig(rootCommand(t, ex.command), ex.about, ex.set)
		if *updateExamples {
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (go test ./cli -run TestExampleConfigs -update writes it)", err)
		}
		if string(want) != got {
			t.Errorf("%s differs from the flags of gridlink %s: go test ./cli -run TestExampleConfigs -update writes it again", file, ex.command)
		}
		all := filepath.Join(t.TempDir(), ex.command+"-all.conf")
		if err := os.WriteFile(all, []byte(withDefaultsSet(rootCommand(t, ex.command), string(want))), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{file, all} {
			c := rootCommand(t, ex.command)
			if err := c.ParseFlags([]string{"--config", f}); err != nil {
				t.Fatal(err)
			}
			if err := c.PreRunE(c, nil); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		c := rootCommand(t, ex.command)
		if err := c.ParseFlags([]string{"--config", file}); err != nil {
			t.Fatal(err)
		}
		if err := c.PreRunE(c, nil); err != nil {
			t.Fatal(err)
		}
		for _, s := range ex.set {
			if !c.Flags().Changed(s.name) {
				t.Errorf("%s: %s not set from the file", file, s.name)
			}
		}
	}
}
