package gridlink

// TEMPORARY: declarations identical to the apinode branch's (node.go:
// Machine, AttachState, Attached, GaveUp, Hold, RefusedForGoodError,
// AttachChange, WatchAttach; perf.go: DefaultMaxStreams, Compression, ParseCompression;
// config.go: Machine), so that serve and cp call the API here as they will
// there. Delete this file when the two branches merge.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/vconn"
)

// Machine is how the overlay knows a node: name, ID, addresses, hub.
type Machine = identity.Machine

// DefaultMaxStreams bounds a link's streams unless told otherwise.
const DefaultMaxStreams = link.DefaultMaxStreams

// Compression is a link's compression (off, s2, zstd, or adaptive per
// block).
type Compression = link.Compression

// ParseCompression reads a compression's name: off, s2, zstd or auto.
func ParseCompression(s string) (Compression, error) { return link.ParseCompression(s) }

// Machine is how the overlay knows the node: name, ID, addresses, hub.
func (n *Node) Machine() Machine { return n.n.Machine() }

// AttachState says, in words, why the node has no hub now ("attaching to
// HUB: REASON, retrying"); "" while attached or without hubs.
func (n *Node) AttachState() string { return n.n.AttachState() }

// Attached is nil while the node is attached (or has no hubs), else a
// *NotAttachedError saying since when and why.
func (n *Node) Attached() error { return n.n.Attached() }

// GaveUp is closed once the hubs have refused the node for good (its
// certificate, role or name); Attached then says why.
func (n *Node) GaveUp() <-chan struct{} { return n.n.GaveUp() }

// Hold is for a long-running node: it returns a context that ends with
// ctx or when the hubs refuse the node for good, and a function that ends
// it and returns why it ended: the refusal (a *RefusedForGoodError), or
// nil.
func (n *Node) Hold(ctx context.Context) (context.Context, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-ctx.Done():
		case <-n.GaveUp():
			cancel()
		}
	}()
	return ctx, func() error {
		cancel()
		select {
		case <-n.GaveUp():
			return &RefusedForGoodError{Node: n.Name(), Err: n.Attached()}
		default:
			return nil
		}
	}
}

// RefusedForGoodError is why a held node ended: its hubs refused it for
// good.
type RefusedForGoodError struct {
	Node string // the node's name
	Err  error  // the refusal (a *NotAttachedError)
}

func (e *RefusedForGoodError) Error() string { return fmt.Sprintf("%s: %v", e.Node, e.Err) }
func (e *RefusedForGoodError) Unwrap() error { return e.Err }

// AttachChange is a change of a node's attachment: attached (to
// Machine.HubName), or not attached for a new reason (State says it).
type AttachChange struct {
	Attached bool
	Machine  Machine
	State    string
}

// attachPoll is how often WatchAttach looks.
const attachPoll = 500 * time.Millisecond

// WatchAttach calls f, until ctx is done, when the node attaches, loses
// its hub or fails to attach for a new reason (its session's own log, with
// Config.Logger, says so too).
func (n *Node) WatchAttach(ctx context.Context, f func(AttachChange)) {
	last := n.AttachState()
	var lastCause string
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(attachPoll):
		}
		st, cause := n.AttachState(), ""
		var na *vconn.NotAttachedError
		if err := n.Attached(); errors.As(err, &na) {
			cause = na.Cause.Error()
		}
		switch {
		case st == "" && last != "":
			f(AttachChange{Attached: true, Machine: n.Machine()})
		case st != "" && (last == "" || cause != lastCause):
			f(AttachChange{Machine: n.Machine(), State: st})
		}
		last, lastCause = st, cause
	}
}
