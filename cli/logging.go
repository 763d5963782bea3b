package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink/status"
)

// Logging of the long-running commands (hub, node, serve, socks, ...):
// log/slog records, timestamped, as text for people or JSON for
// collectors (--log-format). The packages log printf-style (their Logf);
// each line becomes a record whose message is the line, with the
// command's attributes (hub=NAME, node=NAME).

// logFormat is the value of --log-format.
var logFormat = "text"

// addLogFormat adds --log-format to every command (a persistent flag of
// the root).
func addLogFormat(root *cobra.Command) {
	root.PersistentFlags().StringVar(&logFormat, "log-format", "text", "log records as text (timestamped lines) or json (one object a line, for collectors)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if logFormat != "text" && logFormat != "json" {
			return fmt.Errorf("--log-format %q: want text or json", logFormat)
		}
		return nil
	}
}

// newLogger is a logger writing records to w in format ("text" or
// "json").
func newLogger(w io.Writer, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(&lineHandler{w: w, mu: &sync.Mutex{}})
}

// logger is the command's logger (stderr, --log-format), with attrs.
func logger(attrs ...any) *slog.Logger { return newLogger(os.Stderr, logFormat).With(attrs...) }

// printf turns a logger into a package's Logf: each line a record at
// level Info whose message is the line.
func printf(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}

// logf is the Logf of a component that logs only when asked (-v): nil
// (which the packages take as "nowhere") unless verbose.
func logf(verbose bool, attrs ...any) func(string, ...any) {
	if !verbose {
		return nil
	}
	return printf(logger(attrs...))
}

// lineHandler writes a record as one line: the time (RFC 3339, UTC,
// milliseconds), the level, the message as it is (so that it reads as
// the plain line it replaces; its line breaks become "; ", other control
// characters are escaped) and the attributes as key=value.
type lineHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	b.WriteByte(' ')
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	// a message of several lines (a joined error) stays one line, so
	// that every line starts with its record's time; what else a peer's
	// words could do to a terminal (control characters) is escaped.
	b.WriteString(status.PrintableLine(strings.ReplaceAll(r.Message, "\n", "; ")))
	add := func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true
		}
		v := a.Value.Resolve().String()
		if strings.ContainsAny(v, " \t\n\"=") || v == "" || status.PrintableLine(v) != v {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{w: h.w, mu: h.mu, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup ignores groups: the commands use none.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
