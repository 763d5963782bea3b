package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A config file is the alternative to a long command line (--config
// FILE), for services: one setting a line, a flag's name without the
// dashes and its value after a space,
//
//	# the das3v hub
//	name das3v
//	listen 0.0.0.0:7946
//	peer 198.51.100.42:7946
//	peer ssh://root@198.51.100.129/127.0.0.1:7946
//	ca /etc/gridlink/ca.pem
//	announce
//
// blank lines and lines starting with # apart. A flag that takes no
// value (announce, verbose) stands alone or says true or false; a
// repeatable one (peer, hub) repeats. The command line wins: a flag given
// there ignores the file's lines for it. Parsing is strict: an unknown
// name, a value a flag refuses, a missing value, or a flag that is not
// repeatable given twice is an error naming the file and line
// (ConfigFileError), and nothing runs.

// ConfigFileError is a config file line the command refuses.
type ConfigFileError struct {
	File   string
	Line   int
	Reason string
}

func (e *ConfigFileError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// withConfigFile gives c the --config flag, read before c runs.
func withConfigFile(c *cobra.Command) *cobra.Command {
	var file string
	c.Flags().StringVar(&file, "config", "", "read settings from FILE, a flag a line: NAME VALUE (docs/service.md); flags on the command line win")
	prev := c.PreRunE
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if file != "" {
			if err := applyConfigFile(cmd.Flags(), file); err != nil {
				return err
			}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
	return c
}

// applyConfigFile sets fs's flags from file, but those the command line
// set.
func applyConfigFile(fs *pflag.FlagSet, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	fromCLI := map[string]bool{}
	fs.Visit(func(fl *pflag.Flag) { fromCLI[fl.Name] = true })
	firstLine := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, a ...any) error {
			return &ConfigFileError{File: file, Line: n, Reason: fmt.Sprintf(format, a...)}
		}
		name, value, hasValue := strings.Cut(line, " ")
		value = strings.TrimSpace(value)
		name = strings.TrimSpace(name)
		fl := fs.Lookup(name)
		switch {
		case strings.HasPrefix(name, "-"):
			return bad("%q: write the flag's name without dashes", name)
		case name == "config":
			return bad("a config file cannot name another (config)")
		case fl == nil || fl.Hidden:
			return bad("unknown setting %q (no --%s flag here)", name, name)
		}
		isBool := fl.Value.Type() == "bool"
		repeatable := strings.HasSuffix(fl.Value.Type(), "Array") || strings.HasSuffix(fl.Value.Type(), "Slice")
		switch {
		case isBool && !hasValue:
			value = "true"
		case !hasValue || value == "":
			return bad("%s needs a value", name)
		}
		if first, ok := firstLine[name]; ok && !repeatable {
			return bad("%s given twice (first on line %d)", name, first)
		}
		if _, ok := firstLine[name]; !ok {
			firstLine[name] = n
		}
		if fromCLI[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return bad("%s %q: %v", name, value, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	return nil
}
