package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Who may use an agent. An agent acts with its node's credentials (a
// user's proxy certificate, say): whoever reaches its control API dials,
// binds and exposes as that node. So the agent admits a control
// connection only from its own uid and from root, which it learns from
// the kernel (SO_PEERCRED) on every connection; anyone else gets, in the
// control protocol's error form (403 with a JSON StreamError of kind
// KindCallerRefused),
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

// KindCallerRefused is the error kind of a control request from a uid the
// agent does not serve.
const KindCallerRefused = "caller-refused"

// CallerRefusedError is a control connection refused for its caller's uid.
type CallerRefusedError struct {
	What      string // "agent" or "hub"
	OwnerUID  int    // the uid the agent (or hub) runs as
	CallerUID int    // the uid of the refused caller
}

func (e *CallerRefusedError) Error() string {
	return fmt.Sprintf("%s of uid %d refuses uid %d", e.What, e.OwnerUID, e.CallerUID)
}

// refusalBody is the JSON body of a refused control request: a
// StreamError with the uids.
type refusalBody struct {
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

// prepareSocketDir makes the directory of a path socket for uid, mode
// 0700, or checks the one there: a directory (not a link) that uid owns,
// which no one else may enter. A directory uid owns with a looser mode
// is tightened.
func prepareSocketDir(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("agent: control directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("agent: control directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("agent: control directory %s is not a directory (%s)", dir, fi.Mode().Type())
	case !ok:
		return fmt.Errorf("agent: control directory %s: no owner known", dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("agent: control directory %s belongs to uid %d, not to uid %d: refusing it", dir, st.Uid, uid)
	case fi.Mode().Perm()&0o077 != 0:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("agent: control directory %s: %w", dir, err)
		}
	}
	return nil
}

// listenControl listens on a control socket; a path socket whose agent
// is gone (no one answers) is replaced.
func listenControl(control string) (net.Listener, error) {
	ln, err := net.Listen("unix", control)
	if err == nil || strings.HasPrefix(control, "@") || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	if c, derr := net.Dial("unix", control); derr == nil {
		c.Close()
		return nil, err
	} else if !errors.Is(derr, syscall.ECONNREFUSED) {
		return nil, err
	}
	if fi, lerr := os.Lstat(control); lerr != nil || fi.Mode().Type() != os.ModeSocket {
		return nil, err // not a socket: not ours to replace
	}
	if rerr := os.Remove(control); rerr != nil {
		return nil, err
	}
	return net.Listen("unix", control)
}

// peerKey keys a control connection's peer credentials in its context.
type peerKey struct{}

type peerCreds struct {
	uid int
	pid int
	err error
}

// PeerContext is an http.Server's ConnContext for control sockets: it
// records the connecting process's credentials, which Guard checks.
func PeerContext(ctx context.Context, c net.Conn) context.Context {
	uid, pid, err := peerCred(c)
	return context.WithValue(ctx, peerKey{}, peerCreds{uid: uid, pid: pid, err: err})
}

// Guard serves h only to connections (see PeerContext) of this process's
// uid and of root. Any other caller gets 403 with a refusal body (the
// CallerRefusedError text), and logf (default: standard error) the same
// text. what names the server in it ("agent", "hub").
func Guard(what string, h http.Handler, logf func(string, ...any)) http.Handler {
	owner := os.Geteuid()
	if logf == nil {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := r.Context().Value(peerKey{}).(peerCreds)
		if ok && p.err == nil && (p.uid == owner || p.uid == 0) {
			h.ServeHTTP(w, r)
			return
		}
		body := refusalBody{What: what, OwnerUID: owner, CallerUID: p.uid}
		switch {
		case !ok:
			body.CallerUID = -1
			body.StreamError = StreamError{Kind: KindCallerRefused, Msg: what + ": the caller's uid is unknown"}
		case p.err != nil:
			body.CallerUID = -1
			body.StreamError = StreamError{Kind: KindCallerRefused, Msg: what + ": the caller's uid is unknown: " + p.err.Error()}
		default:
			e := &CallerRefusedError{What: what, OwnerUID: owner, CallerUID: p.uid}
			body.StreamError = StreamError{Kind: KindCallerRefused, Msg: e.Error()}
		}
		logf("control socket: %s (pid %d, %s %s)", body.Msg, p.pid, r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(body)
	})
}

// ResponseError is the error a control server's failed answer carries: a
// *CallerRefusedError for a refused caller, a *StreamError for a JSON
// error body, else the body's text.
func ResponseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var rb refusalBody
	if json.Unmarshal(b, &rb) == nil && rb.Msg != "" {
		if rb.Kind == KindCallerRefused && rb.What != "" && rb.CallerUID >= 0 {
			return &CallerRefusedError{What: rb.What, OwnerUID: rb.OwnerUID, CallerUID: rb.CallerUID}
		}
		se := rb.StreamError
		return &se
	}
	return &StreamError{Kind: KindFailed, Msg: "agent: " + strings.TrimSpace(string(b))}
}
