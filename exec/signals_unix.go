//go:build unix

package exec

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// defaultSignals makes the signals a command may be sent reach it with
// their default action, even where the service's own process ignores them.
// A child inherits ignored signals across exec (a node started by nohup
// ignores SIGHUP; one started in the background by a non-interactive shell
// ignores SIGINT and SIGQUIT), and a shell cannot undo that, so the
// caller's forwarded Ctrl-C or hang-up, and a closed output's SIGPIPE,
// would be lost. Handled signals are reset to the default on exec, so the
// service handles each such signal itself, by discarding it: its own
// process goes on ignoring them.
func defaultSignals() {
	var ignored []os.Signal
	for _, s := range []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGPIPE} {
		if signal.Ignored(s) {
			ignored = append(ignored, s)
		}
	}
	if len(ignored) == 0 {
		return
	}
	drainDiscarded()
	signal.Notify(discarded, ignored...)
}

// discarded receives the signals defaultSignals handles, and drops them.
var discarded = make(chan os.Signal, 8)

var drainDiscarded = sync.OnceFunc(func() {
	go func() {
		for range discarded {
		}
	}()
})
