package vconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/pki"
)

// NotAttachedError says that a node has no hub now, since when and why
// (the last attempt's failure or what ended the lost link). Dial returns
// it at once for a target only the hubs can find or reach; a direct
// connection to an address it still knows may be tried first.
type NotAttachedError = hub.NotAttachedError

// firstAttachWait bounds how long Start waits for the first round of
// attempts to attach: a hub that answers at once admits or refuses the
// node before Start returns; one that does not answer keeps the node
// attaching in the background.
const firstAttachWait = 3 * time.Second

// firstAttach waits for the session's first round of attempts (at most
// firstAttachWait): a refusal that trying again cannot change (the hubs
// refused the node's certificate, role or name) fails Start; an
// unreachable hub does not, the node keeps attaching.
func (n *Node) firstAttach(ctx context.Context) error {
	select {
	case <-n.session.FirstRound():
	case <-time.After(firstAttachWait):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := n.session.Refused(); err != nil {
		return err
	}
	if err := n.session.NotAttached(); err != nil {
		n.cfg.Logf("vconn: node %s: starting without a hub: %v", n.cfg.Name, err)
	}
	return nil
}

// Attached says why the node has no hub now: nil while attached (or
// without hubs configured), a refusal that ended its attachments, else a
// *NotAttachedError.
func (n *Node) Attached() error {
	if n.session == nil {
		return nil
	}
	return n.session.NotAttached()
}

// AttachState is what a status display says of the node's hub session:
// empty while attached or without hubs, else "attaching to HUBS: reason,
// retrying (not attached since T)", or "refused: reason; not attaching
// again" after a refusal that ended its attachments.
func (n *Node) AttachState() string {
	err := n.Attached()
	var na *NotAttachedError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &na) && errors.Is(na.Cause, hub.ErrFirstAttempt):
		return "attaching to " + strings.Join(n.cfg.Hubs, ", ") + ": the first attempt is under way"
	case errors.As(err, &na):
		return "attaching to " + strings.Join(n.cfg.Hubs, ", ") + ": " + na.Cause.Error() + ", retrying (not attached since " + na.Since.Format(time.RFC3339) + ")"
	case errors.Is(err, hub.ErrClosed):
		return "closed"
	}
	return "refused: " + err.Error() + "; not attaching again"
}

// hubTransport dials the hubs' transport specs: with cfg.SSH, or with the
// user's ~/.ssh defaults for an ssh:// hub when cfg.SSH is nil (naming
// an ssh:// hub asks for ssh; the node's direct connections try sshds
// only with cfg.SSH).
func hubTransport(creds *pki.Credentials, cfg Config) func(context.Context, string) (net.Conn, error) {
	ssh := cfg.SSH
	if ssh == nil {
		for _, h := range cfg.Hubs {
			if strings.HasPrefix(h, "ssh://") {
				ssh = &direct.SSHConfig{}
				break
			}
		}
	}
	d := &direct.Dialer{Creds: creds, Preferred: cfg.Preferred, SSH: ssh}
	return d.Transport
}

// attachGiveUp bounds WaitAttached when its context has no deadline, as
// hub.Attach does.
const attachGiveUp = 30 * time.Second

// WaitAttached waits until the node is attached to a hub (nil; at once
// without hubs), refused, or ctx is done (30 s if it has no deadline):
// for one-shot work that needs a hub, where a long-running node keeps
// attaching in the background.
func (n *Node) WaitAttached(ctx context.Context) error {
	if n.session == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, attachGiveUp)
		defer cancel()
	}
	if err := n.session.WaitAttached(ctx); err != nil {
		return fmt.Errorf("vconn: node %s: attach to a hub (%v): %w", n.cfg.Name, n.cfg.Hubs, err)
	}
	return nil
}

// GaveUp is closed when the node stops attaching for a refusal (Attached
// says which); never without hubs.
func (n *Node) GaveUp() <-chan struct{} {
	if n.session == nil {
		return nil
	}
	return n.session.GaveUp()
}
