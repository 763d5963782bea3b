package agent

import (
	"sync"

	"github.com/gridlink/gridlink/status"
)

// statusHook is what a service above the agent adds to its status (the
// virtual IP network's addresses and peers: the agent cannot import
// package vip, which sits above it).
type statusHook struct {
	mu sync.Mutex
	f  func(*status.Agent)
}

// SetStatus makes f add to every status the agent answers (GET /status),
// after the agent's own fields; nil removes it. The API sets it for the
// services it starts on the agent's node.
func (a *Agent) SetStatus(f func(*status.Agent)) {
	a.more.mu.Lock()
	a.more.f = f
	a.more.mu.Unlock()
}

func (h *statusHook) fill(st *status.Agent) {
	h.mu.Lock()
	f := h.f
	h.mu.Unlock()
	if f != nil {
		f(st)
	}
}

// credentials are the node's credentials with their lifetimes, none
// unless Config.Credentials reports them.
func (a *Agent) credentials() []status.Credential {
	if a.creds == nil {
		return nil
	}
	return a.creds()
}
