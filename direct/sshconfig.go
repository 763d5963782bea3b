package direct

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The ssh config file: the subset of ssh_config(5) this package honours.
// Host blocks with patterns ('*', '?', '!' negation) select the
// HostName, User, Port and IdentityFile of an alias; as in OpenSSH the
// first value found for a keyword wins, except IdentityFile which
// accumulates, and options before the first Host apply to every host.
// Include is followed (relative paths from ~/.ssh). Match blocks are not
// supported and never apply. Other keywords are ignored. The system-wide
// /etc/ssh/ssh_config is not read.

// sshHost is what the config says about one alias.
type sshHost struct {
	hostName, user, port string
	identityFiles        []string
}

type sshBlock struct {
	patterns []string // nil: applies to every host (before the first Host)
	match    bool     // a Match block: never applies
	opts     [][2]string
}

type sshConfigFile struct {
	blocks []sshBlock
}

// loadSSHConfig reads and parses path; a missing file is an empty config.
func loadSSHConfig(path, home string) (*sshConfigFile, error) {
	f := &sshConfigFile{}
	if err := f.parseFile(path, home, 0); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *sshConfigFile) parseFile(path, home string, depth int) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && depth == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ssh config: %w", err)
	}
	return f.parse(string(b), path, home, depth)
}

// parse adds the blocks of one file's text. Included files' blocks are
// spliced in where the Include stands, as OpenSSH does.
func (f *sshConfigFile) parse(text, path, home string, depth int) error {
	if depth > 16 {
		return fmt.Errorf("ssh config %s: Include nested too deep", path)
	}
	cur := &sshBlock{}
	flush := func() {
		if len(cur.opts) > 0 || cur.patterns != nil || cur.match {
			f.blocks = append(f.blocks, *cur)
		}
	}
	for n, line := range strings.Split(text, "\n") {
		key, args, err := splitSSHLine(line)
		if err != nil {
			return fmt.Errorf("ssh config %s:%d: %v", path, n+1, err)
		}
		switch key {
		case "":
		case "host":
			if len(args) == 0 {
				return fmt.Errorf("ssh config %s:%d: Host without patterns", path, n+1)
			}
			flush()
			cur = &sshBlock{patterns: args}
		case "match":
			flush()
			cur = &sshBlock{patterns: []string{}, match: true}
		case "include":
			// Blocks of the included file apply in the current block's
			// context; approximate that by giving each of them the current
			// patterns when they have none.
			flush()
			outer := *cur
			outer.opts = nil
			for _, pat := range args {
				if !filepath.IsAbs(pat) && !strings.HasPrefix(pat, "~") {
					pat = filepath.Join(home, ".ssh", pat)
				}
				if strings.HasPrefix(pat, "~/") {
					pat = filepath.Join(home, pat[2:])
				}
				files, _ := filepath.Glob(pat)
				for _, inc := range files {
					sub := &sshConfigFile{}
					if err := sub.parseFile(inc, home, depth+1); err != nil {
						return err
					}
					for _, blk := range sub.blocks {
						if blk.patterns == nil {
							blk.patterns, blk.match = outer.patterns, outer.match
						}
						f.blocks = append(f.blocks, blk)
					}
				}
			}
			cur = &sshBlock{patterns: outer.patterns, match: outer.match}
		default:
			if len(args) > 0 {
				cur.opts = append(cur.opts, [2]string{key, args[0]})
			}
		}
	}
	flush()
	return nil
}

// splitSSHLine splits a config line into its lower-cased keyword and its
// arguments ("Key value", "Key=value", double quotes group words).
func splitSSHLine(line string) (string, []string, error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", nil, nil
	}
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return strings.ToLower(line), nil, nil
	}
	key := strings.ToLower(line[:i])
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "=") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	var args []string
	for rest != "" {
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return "", nil, errors.New("unterminated quote")
			}
			args = append(args, rest[1:1+end])
			rest = rest[2+end:]
		} else {
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			args = append(args, rest[:end])
			rest = rest[end:]
		}
		rest = strings.TrimLeft(rest, " \t")
	}
	return key, args, nil
}

// lookup returns the settings for alias.
func (f *sshConfigFile) lookup(alias string) sshHost {
	var h sshHost
	name := strings.ToLower(alias)
	for _, b := range f.blocks {
		if b.match || (b.patterns != nil && !hostMatches(b.patterns, name)) {
			continue
		}
		for _, o := range b.opts {
			switch o[0] {
			case "hostname":
				if h.hostName == "" {
					h.hostName = o[1]
				}
			case "user":
				if h.user == "" {
					h.user = o[1]
				}
			case "port":
				if h.port == "" {
					h.port = o[1]
				}
			case "identityfile":
				h.identityFiles = append(h.identityFiles, o[1])
			}
		}
	}
	return h
}

// hostMatches applies a Host line: some positive pattern matches and no
// negated one does.
func hostMatches(patterns []string, name string) bool {
	ok := false
	for _, p := range patterns {
		for _, q := range strings.Split(p, ",") {
			neg := strings.HasPrefix(q, "!")
			q = strings.ToLower(strings.TrimPrefix(q, "!"))
			if q == "" || !wildcard(q, name) {
				continue
			}
			if neg {
				return false
			}
			ok = true
		}
	}
	return ok
}

// wildcard matches s against p, where '*' is any run and '?' one character.
func wildcard(p, s string) bool {
	star, match := -1, 0
	i, j := 0, 0
	for j < len(s) {
		switch {
		case i < len(p) && (p[i] == '?' || p[i] == s[j]):
			i++
			j++
		case i < len(p) && p[i] == '*':
			star, match = i, j
			i++
		case star >= 0:
			i = star + 1
			match++
			j = match
		default:
			return false
		}
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}
