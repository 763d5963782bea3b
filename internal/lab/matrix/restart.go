package matrix

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// The overlay's churn (make soak): hubs that crash and come back, node
// agents that leave and join. A process started again runs with the
// arguments (and certificate) of its first start, its output appended to
// the same log.

// RestartHub starts the hub of site again, as it first ran, once its
// process (killed by KillHub) has ended.
func (o *Overlay) RestartHub(site string) error {
	c := o.hubs[site]
	if c == nil {
		return fmt.Errorf("no hub for site %s", site)
	}
	s := o.t.Site(site)
	if s == nil {
		return fmt.Errorf("no site %s", site)
	}
	reap(c)
	if err := o.startLogged(HubHost(s), "hub", nil, o.hubArgv[site], os.O_APPEND); err != nil {
		return err
	}
	o.hubs[site] = o.procs[len(o.procs)-1]
	return nil
}

// StopNode ends the node agent on h as a node that leaves does (SIGTERM,
// SIGKILL after 3 s), and waits until it has ended.
func (o *Overlay) StopNode(h *topology.Host) error {
	c := o.nodeCmd[h]
	if c == nil {
		return fmt.Errorf("no node agent on %s", h.ID())
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop the node agent on %s: %w", h.ID(), err)
	}
	done := make(chan struct{})
	go func() { reap(c); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
	return nil
}

// StartNode starts the node agent on h again, as it first ran, and waits
// until it answers (a node that joins).
func (o *Overlay) StartNode(h *topology.Host) error {
	c := o.nodeCmd[h]
	if c == nil {
		return fmt.Errorf("no node agent on %s", h.ID())
	}
	reap(c)
	if err := o.startLogged(h, "node", o.nodeWrap[h], o.nodeArgv[h], os.O_APPEND); err != nil {
		return err
	}
	o.nodeCmd[h] = o.procs[len(o.procs)-1]
	return o.waitAgents([]*topology.Host{h})
}

// HubPID is the process of the hub of site (0 if none).
func (o *Overlay) HubPID(site string) int {
	if c := o.hubs[site]; c != nil && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// NodePID is the process of the node agent on h (0 if none).
func (o *Overlay) NodePID(h *topology.Host) int {
	if c := o.nodeCmd[h]; c != nil && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// reap waits for c's process once; a second wait (Stop's) returns at
// once.
func reap(c *exec.Cmd) {
	if c.ProcessState == nil {
		_ = c.Wait()
	}
}
