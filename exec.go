package gridlink

import (
	"context"
	"log/slog"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/exec"
)

// Commands on other nodes (gridlink exec, and MPI launchers that call it
// where they would call ssh): the exec service a node agent offers
// (Agent.ServeExec) and its client, which goes through the caller's own
// agent as nc does. See package exec for the grid-mapfile and the
// protocol.

// ExecPort is the exec service's virtual port; proxy restrictions call it
// "exec" (exec, or exec@NODEID).
const ExecPort = exec.Port

// DefaultGridMapfile is where the exec service reads its grid-mapfile
// unless told otherwise.
const DefaultGridMapfile = exec.DefaultMapfile

// ExecConfig configures a node agent's exec service (Agent.ServeExec).
// The zero value works: the default grid-mapfile, logged to standard
// error, at most 256 commands at once, the default environment accepted,
// accounts that refuse logins refused.
type ExecConfig struct {
	// Mapfile is the grid-mapfile; empty: DefaultGridMapfile.
	Mapfile string
	// Logger receives every run and refusal (each record with node=NAME);
	// nil: standard error.
	Logger *slog.Logger
	// MaxCommands bounds the commands running at once; zero: 256.
	MaxCommands int
	// AcceptEnv are the environment variables a caller may pass (names,
	// or patterns with * and ?, as sshd's AcceptEnv); others are dropped
	// with a notice to the caller. nil: DefaultExecAcceptEnv(); empty:
	// none. Variables that would run code before the account's shell
	// (LD_*, BASH_ENV, PATH, ...) are refused whatever it says.
	AcceptEnv []string
	// AllowNologin runs commands as accounts whose login shell refuses
	// logins (nologin, false) with /bin/sh; false: they are refused.
	AllowNologin bool
}

// DefaultExecAcceptEnv is ExecConfig.AcceptEnv's default: the locale,
// TERM, and MPI's variables (docs/exec.md).
func DefaultExecAcceptEnv() []string { return exec.DefaultAcceptEnv() }

// ExecService is a node agent's running exec service.
type ExecService struct{ s *exec.Service }

// ServeExec serves exec on the agent's node (ExecPort): grid members the
// grid-mapfile maps to a local account run commands as that account (an
// agent not run by root: as its own user only). It needs a grid CA: in an
// open grid every command is refused, saying so. The agent's Close does
// not stop it; its own Close does.
func (a *Agent) ServeExec(cfg ExecConfig) (*ExecService, error) {
	var logf func(string, ...any)
	if cfg.Logger != nil {
		logf = logfOf(cfg.Logger.With("node", a.a.Node().Name()))
	}
	s, err := exec.Listen(a.a.Node(), exec.Config{Mapfile: cfg.Mapfile, Logf: logf, MaxCommands: cfg.MaxCommands,
		AcceptEnv: cfg.AcceptEnv, AllowNologin: cfg.AllowNologin})
	if err != nil {
		return nil, err
	}
	return &ExecService{s: s}, nil
}

// Close stops accepting commands; those under way go on until they end.
func (s *ExecService) Close() error { return s.s.Close() }

// The exec client's request, local ends and results (package exec's).
type (
	ExecRequest      = exec.Request
	ExecIO           = exec.IO
	ExecStatus       = exec.Status
	ExecRefusedError = exec.RefusedError
	ExecEndedError   = exec.EndedError
	ExecTarget       = exec.Target
	ExecTargetError  = exec.TargetError
)

// ParseExecTarget reads gridlink exec's host argument as ssh reads its
// own: NODE, NODE.grid, NODE@HUB, USER@NODE.grid, USER@NODE@HUB,
// ssh://[USER@]HOST[:PORT] (exec.ParseTarget). A virtual IP address is
// turned into its node by ExecTarget.Resolve.
func ParseExecTarget(s string) (ExecTarget, error) { return exec.ParseTarget(s) }

// Signals Exec forwards (ExecIO.Signals).
const (
	ExecSIGHUP  = exec.SIGHUP
	ExecSIGINT  = exec.SIGINT
	ExecSIGTERM = exec.SIGTERM
)

// Exec runs req on node's exec service over a link that the caller's
// agent c sets up with its credentials (a user's proxy, when she runs her
// own agent with --proxy), and returns how the command ended. A refusal
// is an *ExecRefusedError (the target's log says the same); a link
// refused in its handshake (a proxy restricted to other services, a
// revoked certificate) or cut, an *ExecEndedError saying why.
func Exec(ctx context.Context, c *control.Client, node string, lo control.LinkOptions, req ExecRequest, stdio ExecIO) (ExecStatus, error) {
	return exec.RunThrough(ctx, c, node, lo, req, stdio)
}
