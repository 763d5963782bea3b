package direct

import (
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
// "Match host" and "Match all" blocks apply like Host blocks; a file with
// other Match criteria (exec, user, ...) is refused with its line, and
// SSHConfig.ConfigFile can name another file (or "-", none). Other
// keywords (ProxyJump and ProxyCommand among them) are ignored. The
// system-wide /etc/ssh/ssh_config is not read.

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
	cfg, err := ssh_config.DecodeBytes(text)
	if err != nil {
		return nil, fmt.Errorf("ssh config %s: %w (name another file, or none, in SSHConfig.ConfigFile)", path, err)
	}
	return &sshConfigFile{path: path, cfg: cfg}, nil
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
