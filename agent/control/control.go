// Package control is the node agent's control API as its callers see it
// (gridlink's CLI, nc, forward, socks, the Go API): the protocol's
// requests and its error and event forms, where the control sockets are
// (per-user sockets, the system socket), and the Client: status, ping,
// doctor and perf (their answers are package status's), and the stream
// requests (connect, bind, expose) with the client's side of the fd
// handoff and of stream end reasons. The agent's side, and what it offers
// other nodes, is package agent's.
//
// It links none of the overlay (hub, vconn, link, direct, nat, portmap;
// internal/archtest holds it to that), so a program that only talks to an
// agent stays small and cannot reach past it.
//
// The control API is HTTP with JSON bodies over a unix socket, served only
// to the agent's own uid and root. Who may use an agent: an agent acts
// with its node's credentials (a user's proxy certificate, say): whoever
// reaches its control API dials, binds and exposes as that node. So the
// agent admits a control connection only from its own uid and from root,
// which it learns from the kernel (SO_PEERCRED) on every connection;
// anyone else gets, in the protocol's error form (403 with a JSON Refusal:
// a StreamError of kind KindCallerRefused, and the uids),
//
//	agent of uid N refuses uid M
//
// and the agent logs the same line. Where the sockets are:
//
//   - root's agent (a host's system agent): DefaultControl, the abstract
//     socket "@gridlink-agent", one per network namespace (also in the lab).
//   - any other user's agent: a socket of that user, UserControl:
//     $XDG_RUNTIME_DIR/gridlink/agent.sock, or without XDG_RUNTIME_DIR
//     /tmp/gridlink-UID/agent.sock; the directory is the user's, mode 0700
//     (the agent makes it, and refuses one that another user owns).
//
// A client without an explicit address (the CLI without --control) tries
// the caller's own socket first, then the system one, and uses a socket
// found there only if the agent behind it runs as the caller or as root
// (so another user who took "@gridlink-agent" first cannot pose as the
// host's agent).
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/peercred"
)

// DefaultControl is the system agent's control socket address (abstract,
// per network namespace): root's agent listens there.
const DefaultControl = "@gridlink-agent"

// UserControl is the control socket of a non-root user's agent:
// $XDG_RUNTIME_DIR/gridlink/agent.sock, else /tmp/gridlink-UID/agent.sock.
func UserControl() string {
	return userControl(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR"), os.TempDir())
}

func userControl(uid int, xdg, tmp string) string {
	if filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "gridlink", "agent.sock")
	}
	return filepath.Join(tmp, "gridlink-"+strconv.Itoa(uid), "agent.sock")
}

// OwnControl is where this process's agent listens by default: the system
// socket for root, UserControl for anyone else.
func OwnControl() string {
	if os.Geteuid() == 0 {
		return DefaultControl
	}
	return UserControl()
}

// defaultControls are the sockets a client without an explicit address
// tries, in order.
func defaultControls() []string {
	if os.Geteuid() == 0 {
		return []string{DefaultControl}
	}
	return []string{UserControl(), DefaultControl}
}

// KindCallerRefused is the error kind of a control request from a uid the
// agent does not serve.
const KindCallerRefused = "caller-refused"

// CallerRefusedError is a control connection refused for its caller's
// uid ("agent" or "hub" of uid N refuses uid M): the one refusal of
// another account, peercred's.
type CallerRefusedError = peercred.RefusedError

// Refusal is the JSON body of a refused control request (403): a
// StreamError of kind KindCallerRefused with the uids; CallerUID is -1
// when the caller's uid is unknown.
type Refusal struct {
	StreamError
	What      string `json:"what"`
	OwnerUID  int    `json:"owner_uid"`
	CallerUID int    `json:"caller_uid"`
}

// ForeignAgentError says a control socket found by default is held by a
// process of another uid than the caller's or root's.
type ForeignAgentError struct {
	Control string
	UID     int // the uid behind Control
}

func (e *ForeignAgentError) Error() string {
	return fmt.Sprintf("agent: the control socket %s is held by uid %d, neither you (uid %d) nor root: not using it (pass --control to insist)", e.Control, e.UID, os.Geteuid())
}

// ErrNoAgent says no agent answers on the control socket.
var ErrNoAgent = errors.New("no gridlink node agent runs here: start one with `gridlink node --hub HOST:PORT`")

// DialError is a control socket that could not be reached for another
// reason than that no agent listens there (permission denied, say).
type DialError struct {
	Control string
	Err     error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("agent: control socket %s: %v", e.Control, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// ResponseError is the error a control server's failed answer carries: a
// *CallerRefusedError for a refused caller, a *StreamError for a JSON
// error body, else the body's text.
func ResponseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var rb Refusal
	if json.Unmarshal(b, &rb) == nil && rb.Msg != "" {
		if rb.Kind == KindCallerRefused && rb.What != "" && rb.CallerUID >= 0 {
			return &CallerRefusedError{What: rb.What, OwnerUID: rb.OwnerUID, CallerUID: rb.CallerUID}
		}
		se := rb.StreamError
		return &se
	}
	return &StreamError{Kind: KindFailed, Msg: "agent: " + strings.TrimSpace(string(b))}
}
