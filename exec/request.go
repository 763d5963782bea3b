package exec

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Request is what a client asks the service to run (frame 'Q').
type Request struct {
	// Account is the local account to run as; empty: the first one the
	// grid-mapfile maps the caller to. It must be one of the caller's.
	Account string `json:"account,omitempty"`
	// Command is joined with spaces and run by the account's login shell
	// with -c, as ssh runs a command; empty: an interactive login shell.
	Command []string `json:"command,omitempty"`
	// Env are NAME=VALUE settings added to the minimal login environment
	// (HOME, USER, LOGNAME, SHELL, PATH; TERM with a pty): those the
	// service accepts (Config.AcceptEnv; the others dropped, the caller
	// told on stderr); one it never passes (env.go: LD_*, BASH_ENV, PATH,
	// ...) refuses the request.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory (absolute); empty: the account's home.
	Dir string `json:"dir,omitempty"`
	// Pty runs the command on a new pseudo-terminal of Rows×Cols, its
	// TERM Term.
	Pty  bool   `json:"pty,omitempty"`
	Term string `json:"term,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Features are protocol features the client takes (frame.go: 'F');
	// a service answers for those it knows and ignores the others. Set by
	// RunThrough (FeatureStdinLink); Run sends none.
	Features []string `json:"features,omitempty"`
}

// Bounds of a request.
const (
	MaxArgs = 4096
	MaxEnv  = 256
	// MaxFeatures bounds Request.Features.
	MaxFeatures = 16
)

var (
	accountRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	termRE    = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,64}$`)
	featureRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
)

// Check says what is wrong with a request, or nil.
func (r *Request) Check() error {
	if r.Account != "" && !accountRE.MatchString(r.Account) {
		return fmt.Errorf("account %q: want a login name (letters, digits, '_', '.', '-'; at most 32)", r.Account)
	}
	if len(r.Command) > MaxArgs {
		return fmt.Errorf("%d command words, at most %d", len(r.Command), MaxArgs)
	}
	for _, a := range r.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("command word %q holds a NUL byte", a)
		}
	}
	if len(r.Env) > MaxEnv {
		return fmt.Errorf("%d environment settings, at most %d", len(r.Env), MaxEnv)
	}
	for _, e := range r.Env {
		name, v, ok := strings.Cut(e, "=")
		if !ok || !envNameRE.MatchString(name) {
			return fmt.Errorf("environment setting %q: want NAME=VALUE, NAME letters, digits and '_', not starting with a digit", e)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment setting %s holds a NUL byte", name)
		}
	}
	if r.Dir != "" && (!filepath.IsAbs(r.Dir) || strings.IndexByte(r.Dir, 0) >= 0) {
		return fmt.Errorf("working directory %q: want an absolute path", r.Dir)
	}
	if r.Term != "" && !termRE.MatchString(r.Term) {
		return fmt.Errorf("terminal type %q: want letters, digits and _.+- (at most 64)", r.Term)
	}
	if len(r.Features) > MaxFeatures {
		return fmt.Errorf("%d features, at most %d", len(r.Features), MaxFeatures)
	}
	for _, f := range r.Features {
		if !featureRE.MatchString(f) {
			return fmt.Errorf("feature %q: want lower-case letters, digits and '-' (at most 32)", f)
		}
	}
	if !r.Pty && (r.Term != "" || r.Rows != 0 || r.Cols != 0) {
		return fmt.Errorf("a terminal type or size without a pty")
	}
	return nil
}

// wants says whether the request lists feature f.
func (r *Request) wants(f string) bool {
	for _, g := range r.Features {
		if g == f {
			return true
		}
	}
	return false
}

// shellLine is the command as the shell gets it: the words joined with
// spaces, as ssh sends them.
func (r *Request) shellLine() string { return strings.Join(r.Command, " ") }
