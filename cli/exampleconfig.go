package cli

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The example config files in examples/ (hub.conf, node.conf, serve.conf,
// dashboard.conf) are generated from the commands' flags by exampleConfig,
// so that they list every setting with its help text and default and never
// drift from the flags: TestExampleConfigs regenerates them, compares them
// with the committed files and parses them with the config reader
// (applyConfigFile); `go test ./cli -run TestExampleConfigs -update`
// writes them again after a flag changes.
//
// In a file, a setting that a production site sets is active with an
// example value; every other one is commented out as "#name VALUE", the
// value being the default (or a placeholder where there is none), so that
// removing the "#" keeps the default.

// exampleSetting is an active line of an example config.
type exampleSetting struct{ name, value string }

// exampleConfigs are the commands with example configs, each with its
// file's opening words and the settings it sets.
var exampleConfigs = []struct {
	command, about string
	set            []exampleSetting
}{
	{"hub", "a site's hub (docs/nodes-and-hubs.md, docs/service.md)", []exampleSetting{
		{"name", "das3v"}, {"listen", "0.0.0.0:7946"}, {"key", "/var/lib/gridlink/hub.key"},
		{"peer", "198.51.100.42:7946"}, {"peer", "ssh://gridlink@198.51.100.129/127.0.0.1:7946"},
		{"ca", "/etc/gridlink/ca.pem"}, {"crl", "/etc/gridlink/crl.pem"}, {"cert", "/etc/gridlink/hub.pem"},
	}},
	{"node", "a host's node agent (docs/nodes-and-hubs.md, docs/service.md)", []exampleSetting{
		{"name", "das3v-n1"}, {"hub", "198.51.100.10:7946"}, {"key", "/var/lib/gridlink/node.key"},
		{"ca", "/etc/gridlink/ca.pem"}, {"crl", "/etc/gridlink/crl.pem"}, {"cert", "/etc/gridlink/node.pem"},
	}},
	{"serve", "a transfer service (docs/transfers.md)", []exampleSetting{
		{"name", "das3v-data"}, {"hub", "198.51.100.10:7946"}, {"root", "/data"}, {"key", "/var/lib/gridlink/data.key"},
		{"ca", "/etc/gridlink/ca.pem"}, {"crl", "/etc/gridlink/crl.pem"}, {"cert", "/etc/gridlink/data.pem"},
	}},
	{"dashboard", "a user's dashboard (docs/operations.md)", []exampleSetting{
		{"hub", "198.51.100.10:7946"}, {"ca", "/etc/gridlink/ca.pem"}, {"crl", "/etc/gridlink/crl.pem"},
		{"proxy", "/home/alice/.gridlink/proxy.pem"},
	}},
}

// machineDefaults are defaults that depend on the machine the generator
// runs on, written in words instead.
var machineDefaults = map[string]string{"name": "this host's name"}

// exampleConfig writes the example config of c (a command of Root, so
// that its flags include the global ones).
func exampleConfig(c *cobra.Command, about string, set []exampleSetting) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# gridlink %s --config FILE: %s.\n", c.Name(), about)
	b.WriteString(`#
# Generated from the flags of ` + "`gridlink " + c.Name() + "`" + ` (cli/exampleconfig.go; do not
# edit: TestExampleConfigs checks it, and -update writes it again).
# One setting a line: a flag's name without the dashes, a space and its
# value. A flag without a value (a switch) stands alone or says true or
# false; a repeatable flag repeats. Lines starting with # are comments;
# "#name VALUE" is a setting left at its default: remove the # to set it.
# Flags on the command line win over the file.
`)
	active := map[string][]string{}
	for _, s := range set {
		active[s.name] = append(active[s.name], s.value)
	}
	c.InheritedFlags() // merges the global flags into c.Flags()
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden || fl.Name == "config" || fl.Name == "help" {
			return
		}
		b.WriteString("\n")
		writeComment(&b, "--"+fl.Name+" ("+flagKind(fl)+"): "+fl.Usage+defaultWords(fl))
		if vs, ok := active[fl.Name]; ok {
			for _, v := range vs {
				fmt.Fprintf(&b, "%s %s\n", fl.Name, v)
			}
			return
		}
		fmt.Fprintf(&b, "#%s %s\n", fl.Name, exampleValue(fl))
	})
	return b.String()
}

// flagKind says what a flag's value is, in the words of the file.
func flagKind(fl *pflag.Flag) string {
	t := fl.Value.Type()
	switch {
	case t == "bool":
		return "a switch"
	case strings.HasSuffix(t, "Array") || strings.HasSuffix(t, "Slice"):
		return "repeatable"
	case t == "duration":
		return "a duration, e.g. 30s, 2h"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "a number"
	}
	return "a value"
}

// defaultWords is the default, as the help prints it, or "".
func defaultWords(fl *pflag.Flag) string {
	if d, ok := machineDefaults[fl.Name]; ok {
		return " (default: " + d + ")"
	}
	if v := defaultValue(fl); v != "" && (v != "false" || fl.Value.Type() != "bool") {
		return " (default " + v + ")"
	}
	return ""
}

// defaultValue is fl's default as a config value, or "" without one.
func defaultValue(fl *pflag.Flag) string {
	switch d := fl.DefValue; {
	case d == "[]", d == "":
		return ""
	default:
		return d
	}
}

// exampleValue is the value of fl's commented-out line: its default, or
// a placeholder.
func exampleValue(fl *pflag.Flag) string {
	if _, ok := machineDefaults[fl.Name]; ok {
		return strings.ToUpper(fl.Name)
	}
	if v := defaultValue(fl); v != "" {
		return v
	}
	if name, _ := pflag.UnquoteUsage(fl); name != "" && strings.ToUpper(name) == name && !strings.ContainsFunc(name, unicode.IsSpace) {
		return name
	}
	return "VALUE"
}

// writeComment writes text as # lines of at most 72 columns.
func writeComment(b *strings.Builder, text string) {
	line := "#"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 72 && line != "#" {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
}
