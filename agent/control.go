package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/peercred"
)

// The agent's side of who may use it (package control's doc says who,
// and where the sockets are): the socket directory, the listener, and
// Guard, which checks every control connection's peer credentials.

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
	owner, ok := ownerUID(fi)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("agent: control directory %s is not a directory (%s)", dir, fi.Mode().Type())
	case !ok:
		return fmt.Errorf("agent: control directory %s: no owner known", dir)
	case owner != uid:
		return fmt.Errorf("agent: control directory %s belongs to uid %d, not to uid %d: refusing it", dir, owner, uid)
	case fi.Mode().Perm()&0o077 != 0:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("agent: control directory %s: %w", dir, err)
		}
	}
	return nil
}

// listenControl listens on a control socket; a path socket whose agent
// is gone (no one answers) is replaced.
func listenControl(sock string) (net.Listener, error) {
	ln, err := net.Listen("unix", sock)
	if err == nil || strings.HasPrefix(sock, "@") || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	if c, derr := net.Dial("unix", sock); derr == nil {
		c.Close()
		return nil, err
	} else if !errors.Is(derr, syscall.ECONNREFUSED) {
		return nil, err
	}
	if fi, lerr := os.Lstat(sock); lerr != nil || fi.Mode().Type() != os.ModeSocket {
		return nil, err // not a socket: not ours to replace
	}
	if rerr := os.Remove(sock); rerr != nil {
		return nil, err
	}
	return net.Listen("unix", sock)
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
	uid, pid, err := peercred.Unix(c)
	return context.WithValue(ctx, peerKey{}, peerCreds{uid: uid, pid: pid, err: err})
}

// Guard serves h only to connections (see PeerContext) of this process's
// uid and of root. Any other caller gets 403 with a refusal body (the
// control.CallerRefusedError text), and logf (default: standard error) the same
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
		body := control.Refusal{What: what, OwnerUID: owner, CallerUID: p.uid}
		switch {
		case !ok:
			body.CallerUID = -1
			body.StreamError = control.StreamError{Kind: control.KindCallerRefused, Msg: what + ": the caller's uid is unknown"}
		case p.err != nil:
			body.CallerUID = -1
			body.StreamError = control.StreamError{Kind: control.KindCallerRefused, Msg: what + ": the caller's uid is unknown: " + p.err.Error()}
		default:
			e := &control.CallerRefusedError{What: what, OwnerUID: owner, CallerUID: p.uid}
			body.StreamError = control.StreamError{Kind: control.KindCallerRefused, Msg: e.Error()}
		}
		logf("control socket: %s (pid %d, %s %s)", body.Msg, p.pid, r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(body)
	})
}
