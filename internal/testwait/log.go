package testwait

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Log is a log that goroutines write (Logf, or Write as an io.Writer)
// while a test reads it (String) or waits for a line (Line). The zero Log
// is empty and ready.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Logf appends a line, as a Logf of the product's configurations does.
func (l *Log) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Line waits (Until, Default) for a line that holds every one of parts,
// and returns it; the test fails naming the parts and showing the log.
func (l *Log) Line(t testing.TB, parts ...string) string {
	t.Helper()
	var found string
	has := func() bool {
		for line := range strings.SplitSeq(l.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				found = line
				return true
			}
		}
		return false
	}
	if !has() {
		Until(t, fmt.Sprintf("a log line with %q", parts), 0, has)
	}
	return found
}
