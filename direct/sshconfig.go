package direct

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// The ssh config file, read with github.com/kevinburke/ssh_config: Host
// blocks with patterns ('*', '?', '!' negation; the alias lower-cased, as
// OpenSSH does) select the HostName, User, Port and IdentityFile of an
// alias; as in OpenSSH the first value found for a keyword wins, except
// IdentityFile which accumulates, and options before the first Host
// apply to every host. Include is followed (relative paths from ~/.ssh).
// "Match host PATTERNS" and "Match all" blocks apply like Host blocks;
// Match blocks of other criteria (exec, user, several at once), which the
// library refuses, never apply (matchNever). Other keywords (ProxyJump
// and ProxyCommand among them) are ignored. The system-wide
// /etc/ssh/ssh_config is not read.

// sshHost is what the config says about one alias.
type sshHost struct {
	hostName, user, port string
	identityFiles        []string
}

// sshConfigFile is a parsed ssh config file.
type sshConfigFile struct {
	path string
	cfg  *ssh_config.Config // nil: no file
}

// loadSSHConfig reads and parses path; a missing file is an empty config.
func loadSSHConfig(path string) (*sshConfigFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &sshConfigFile{path: path}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ssh config: %w", err)
	}
	return parseSSHConfig(b, path)
}

// parseSSHConfig parses one file's text (path names it in errors).
func parseSSHConfig(text []byte, path string) (*sshConfigFile, error) {
	cfg, err := ssh_config.DecodeBytes(matchNever(text))
	if err != nil {
		return nil, fmt.Errorf("ssh config %s: %w", path, err)
	}
	return &sshConfigFile{path: path, cfg: cfg}, nil
}

// matchNever rewrites the Match lines of the config text that are not
// "Match all" or "Match host PATTERNS" into a Host line that no alias
// matches: the library refuses their criteria (it cannot run Match exec,
// say), and refusing the user's whole file for them would leave every
// ssh transport unusable. (Files it Includes are read as they are.)
func matchNever(text []byte) []byte {
	lines := bytes.Split(text, []byte("\n"))
	for i, l := range lines {
		f := strings.Fields(strings.Replace(string(l), "=", " ", 1))
		if len(f) == 0 || !strings.EqualFold(f[0], "match") {
			continue
		}
		all := len(f) == 2 && strings.EqualFold(f[1], "all")
		host := len(f) == 3 && strings.EqualFold(f[1], "host")
		if !all && !host {
			lines[i] = []byte("Host !*")
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// lookup returns the settings for alias.
func (f *sshConfigFile) lookup(alias string) (sshHost, error) {
	var h sshHost
	if f.cfg == nil {
		return h, nil
	}
	name := strings.ToLower(alias)
	var err error
	get := func(key string) string {
		v, e := f.cfg.Get(name, key)
		err = errors.Join(err, e)
		return v
	}
	h.hostName, h.user, h.port = get("HostName"), get("User"), get("Port")
	ids, e := f.cfg.GetAll(name, "IdentityFile")
	h.identityFiles = ids
	if err = errors.Join(err, e); err != nil {
		return sshHost{}, fmt.Errorf("ssh config %s: %w", f.path, err)
	}
	return h, nil
}
