package exec

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gridlink/gridlink/direct"
)

// The caller's environment settings (Request.Env) reach the command only
// as sshd's AcceptEnv lets them: a name the node's accept list matches
// (patterns with * and ?; Config.AcceptEnv, defaultAcceptEnv unless the
// operator sets it) is passed, any other is dropped with a notice to the
// caller (a stderr line before the command's output) and to the log. A
// name on neverPassed is refused whatever the accept list says: the
// command does not run, and both ends name the variable and why. Those
// variables change what runs before the account's shell applies its
// rules (the dynamic loader, the C library, the shell's own start-up),
// or what the login sets from the account itself: a caller could run
// code as an account whose shell is not for logins, or leave a
// restricted shell.

// defaultAcceptEnv is what the service passes unless told otherwise:
// the locale and the terminal, as Debian's sshd accepts them, and the
// variables of MPI's launchers and libraries (Open MPI and PMIx/PRRTE:
// OMPI_*, PMIX_*, PRTE_*; MPICH: HYDRA_*, PMI_*, MPIR_CVAR_*), which a
// user may set for her daemons and ranks. Neither Open MPI's rsh
// launcher nor hydra's ssh launcher passes any through the agent (their
// settings travel in the command line or hydra's own connection).
var defaultAcceptEnv = []string{"LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "NO_COLOR",
	"OMPI_*", "PMIX_*", "PRTE_*", "HYDRA_*", "PMI_*", "MPIR_CVAR_*"}

// DefaultAcceptEnv returns the patterns of the environment variables the
// exec service passes unless Config.AcceptEnv says otherwise.
func DefaultAcceptEnv() []string { return append([]string(nil), defaultAcceptEnv...) }

// neverPassed are the variables refused whatever the accept list says,
// by why.
var neverPassed = []struct {
	why   string
	names []string
}{
	{"the dynamic loader's: it would load code of the caller's choosing into the account's shell before the shell runs",
		[]string{"LD_*", "DYLD_*", "_RLD*", "LIBPATH", "SHLIB_PATH", "GLIBC_TUNABLES"}},
	{"the C library's (glibc refuses it to setuid programs): it would load code or data of the caller's choosing into the account's shell",
		[]string{"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_*", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"}},
	{"the shell's: it would run commands of the caller's choosing as the shell starts, before its rules apply",
		[]string{"BASH_ENV", "ENV", "BASH_FUNC_*", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE", "EXECIGNORE", "FPATH", "ZDOTDIR"}},
	{"set from the account as a login sets it: the account's own, not the caller's",
		[]string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "MAIL"}},
	{"an interpreter's: it would make a script the account runs load code of the caller's choosing",
		[]string{"PYTHON*", "PERL5*", "PERLLIB", "PERLIO_DEBUG", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "LUA_INIT*", "LUA_PATH*", "LUA_CPATH*", "GIT_*"}},
	{"MPI's: it would make an MPI program load components from a directory of the caller's choosing",
		[]string{"*_MCA_mca_base_component_path", "*_MCA_mca_component_path", "UCX_MODULE_DIR"}},
}

// neverWhy says why name is never passed, or "" if it may be.
func neverWhy(name string) string {
	for _, g := range neverPassed {
		for _, p := range g.names {
			if ok, _ := path.Match(p, name); ok {
				return g.why
			}
		}
	}
	return ""
}

// EnvRefusedError is a request that sets a variable the exec service
// never passes (its name and why); the command does not run.
type EnvRefusedError struct {
	Node string // the target
	Name string
	Why  string
}

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *EnvRefusedError) Unwrap() error { return direct.ErrRefused }

func (e *EnvRefusedError) Error() string {
	return fmt.Sprintf("%s does not pass %s to a command, whatever its accept list: %s; set it in the command line instead, where the account's shell decides", e.Node, e.Name, e.Why)
}

// envPolicy is the service's accept list.
type envPolicy struct{ accept []string }

// newEnvPolicy checks an accept list (nil: defaultAcceptEnv): patterns
// with * and ?, none naming exactly a variable that is never passed (an
// operator's mistake said at start rather than a silent no).
func newEnvPolicy(patterns []string) (*envPolicy, error) {
	if patterns == nil {
		patterns = defaultAcceptEnv
	}
	p := &envPolicy{}
	for _, pat := range patterns {
		if _, err := path.Match(pat, ""); err != nil || pat == "" || strings.ContainsAny(pat, "=/") {
			return nil, fmt.Errorf("exec service: accepted environment %q: want a variable name or a pattern of one with * and ?", pat)
		}
		if !strings.ContainsAny(pat, "*?[") {
			if why := neverWhy(pat); why != "" {
				return nil, fmt.Errorf("exec service: accepted environment %q: never passed, whatever the accept list (%s)", pat, why)
			}
		}
		p.accept = append(p.accept, pat)
	}
	return p, nil
}

// accepts says whether the accept list matches name.
func (p *envPolicy) accepts(name string) bool {
	for _, pat := range p.accept {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// sift splits a request's settings: those passed, and the names of
// those dropped (not accepted); a name never passed is an
// *EnvRefusedError, the first one.
func (p *envPolicy) sift(node string, env []string) (pass []string, dropped []string, err error) {
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if why := neverWhy(name); why != "" {
			return nil, nil, &EnvRefusedError{Node: node, Name: name, Why: why}
		}
		if p.accepts(name) {
			pass = append(pass, e)
		} else if !slices.Contains(dropped, name) {
			dropped = append(dropped, name)
		}
	}
	return pass, dropped, nil
}

// droppedNotice is the line the caller and the log read about the
// variables dropped.
func (p *envPolicy) droppedNotice(node string, dropped []string) string {
	only := "none"
	if len(p.accept) > 0 {
		only = "only " + strings.Join(p.accept, " ")
	}
	return fmt.Sprintf("exec at %s: not passed to the command: %s (the node passes %s; its operator sets that with --exec-accept-env)",
		node, strings.Join(dropped, ", "), only)
}

// envNames are the names of settings, for the log (never their values).
func envNames(env []string) string {
	names := make([]string, 0, len(env))
	for _, e := range env {
		n, _, _ := strings.Cut(e, "=")
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, " ")
}
