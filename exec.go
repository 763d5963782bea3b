package gridlink

import (
	"context"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/exec"
)

// Commands on other nodes (gridlink exec, and MPI launchers that call it
// where they would call ssh): the exec service a node agent offers
// (AgentConfig.Exec) and its client, which goes through the caller's own
// agent as nc does. See package exec for the grid-mapfile and the
// protocol.

// ExecPort is the exec service's virtual port; proxy restrictions call it
// "exec" (exec, or exec@NODEID).
const ExecPort = exec.Port

// DefaultGridMapfile is where the exec service reads its grid-mapfile
// unless told otherwise.
const DefaultGridMapfile = exec.DefaultMapfile

// ExecConfig configures a node agent's exec service. The zero value
// serves none.
type ExecConfig struct {
	// Allow serves exec on ExecPort: grid members the grid-mapfile maps to
	// a local account run commands as that account (an agent not run by
	// root: as its own user only). It needs a grid CA.
	Allow bool
	// Mapfile is the grid-mapfile; empty: DefaultGridMapfile.
	Mapfile string
}

// The exec client's request, local ends and results (package exec's).
type (
	ExecRequest      = exec.Request
	ExecIO           = exec.IO
	ExecStatus       = exec.Status
	ExecRefusedError = exec.RefusedError
	ExecEndedError   = exec.EndedError
)

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

// startExec starts an agent's exec service, if cfg allows one.
func startExec(a *Agent, cfg ExecConfig, logf func(string, ...any)) error {
	if !cfg.Allow {
		return nil
	}
	s, err := exec.Listen(a.a.Node(), exec.Config{Mapfile: cfg.Mapfile, Logf: logf})
	if err != nil {
		return err
	}
	a.exec = s
	return nil
}
