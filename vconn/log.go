package vconn

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// logfHandler hands the direct listener's records (failed and refused
// handshakes) to Config.Logf, so that they go where the node's own log
// goes: nowhere unless the caller asked. A refused handshake is routine
// for a node: the losers of its own method races call back too late.
type logfHandler struct {
	logf  func(string, ...any)
	attrs []slog.Attr // from WithAttrs
}

func (h logfHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h logfHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.logf("%s", b.String())
	return nil
}

func (h logfHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

// WithGroup ignores groups: the direct listener uses none.
func (h logfHandler) WithGroup(string) slog.Handler { return h }
