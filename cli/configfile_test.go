package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gridlink.conf")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A hub's settings from a file: values, repeated flags, a flag without a
// value, comments and blank lines; the command line wins.
func TestConfigFile(t *testing.T) {
	c := hubCmd()
	file := writeConfig(t, `# the das3v hub
name das3v

listen 0.0.0.0:7950
peer 198.51.100.42:7946
peer ssh://root@198.51.100.129/127.0.0.1:7946
announce
verbose false
ca /etc/gridlink/ca pem with spaces.pem
control /run/gridlink/hub.sock
`)
	if err := c.ParseFlags([]string{"--config", file, "--control", "@mine"}); err != nil {
		t.Fatal(err)
	}
	if err := c.PreRunE(c, nil); err != nil {
		t.Fatal(err)
	}
	f := c.Flags()
	get := func(name string) string { return f.Lookup(name).Value.String() }
	peers, _ := f.GetStringArray("peer")
	if get("name") != "das3v" || !f.Changed("name") || get("listen") != "0.0.0.0:7950" || get("announce") != "true" || get("verbose") != "false" ||
		get("ca") != "/etc/gridlink/ca pem with spaces.pem" || !slices.Equal(peers, []string{"198.51.100.42:7946", "ssh://root@198.51.100.129/127.0.0.1:7946"}) {
		t.Errorf("settings: name %q listen %q announce %q verbose %q ca %q peers %q", get("name"), get("listen"), get("announce"), get("verbose"), get("ca"), peers)
	}
	if get("control") != "@mine" {
		t.Errorf("control %q; the command line's @mine wins", get("control"))
	}
}

// Strict parsing: every refusal names the file and the line.
func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct {
		text string
		line int
	}{
		{"name a\nlisen 0.0.0.0:1\n", 2},
		{"# x\n\nannounce maybe\n", 3},
		{"listen\n", 1},
		{"listen a:1\nlisten b:2\n", 2},
		{"--listen a:1\n", 1},
		{"config other.conf\n", 1},
		{"max-proxy-lifetime forever\n", 1},
	} {
		cmd := hubCmd()
		file := writeConfig(t, c.text)
		if err := cmd.ParseFlags([]string{"--config", file}); err != nil {
			t.Fatal(err)
		}
		err := cmd.PreRunE(cmd, nil)
		var ce *ConfigFileError
		if !errors.As(err, &ce) || ce.File != file || ce.Line != c.line {
			t.Errorf("%q: %v; want a ConfigFileError at line %d", c.text, err, c.line)
		}
	}
	cmd := hubCmd()
	if err := cmd.ParseFlags([]string{"--config", "/nonexistent/gridlink.conf"}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// The node, serve and dashboard commands take a config file too.
func TestConfigFileCommands(t *testing.T) {
	for _, c := range Root().Commands() {
		switch c.Name() {
		case "hub", "node", "serve", "dashboard":
			if c.Flags().Lookup("config") == nil {
				t.Errorf("gridlink %s has no --config", c.Name())
			}
		}
	}
}
