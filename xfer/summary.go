package xfer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	EventPlan  EventKind = 1 // what the sender offers: N regular files of Size bytes (and directories)
	EventStart EventKind = 2 // file ID (Path, Size bytes) starts
	EventBytes EventKind = 3 // file ID has N of its Size bytes (sent or kept)
	EventDone  EventKind = 4 // file ID is done: stored and verified, or Err says why not
	EventDir   EventKind = 5 // directory ID (Path) is made, or was there
)

// Event is a step of a transfer, for progress displays. Events of one
// transfer come from one goroutine at a time, in order.
type Event struct {
	Kind EventKind
	ID   uint32
	Path string
	Size int64
	N    int64
	Err  string
}

// Summary is what a transfer did.
type Summary struct {
	Files    int         `json:"files"`            // regular files stored and verified (or already there whole)
	Dirs     int         `json:"dirs"`             // directories made or already there
	Failed   int         `json:"failed"`           // entries not stored (see Errors)
	Bytes    int64       `json:"bytes"`            // the size of the files stored
	Sent     int64       `json:"sent"`             // file data sent over the link, all attempts counted
	Kept     int64       `json:"kept"`             // bytes the receiver already had and kept (resume)
	Attempts int         `json:"attempts"`         // sessions it took (more after dropped connections)
	Seconds  float64     `json:"seconds"`          // wall time
	Mbps     float64     `json:"mbit_per_s"`       // Bytes over Seconds
	Errors   []FileError `json:"errors,omitempty"` // the first maxErrors failures
	Error    string      `json:"error,omitempty"`  // why a push's session failed (Push returns it as an error)
}

// FileError is why an entry was not stored.
type FileError struct {
	Path  string `json:"path"`
	Error string `json:"error"`
	// Changed: the source file changed while it was sent (its size or
	// mtime at the end differed from the start), so what was sent could
	// be torn; nothing of it was stored. The transfer's error is then a
	// ChangedError.
	Changed bool `json:"changed,omitempty"`
}

// ErrSourceChanged is what a ChangedError is.
var ErrSourceChanged = errors.New("xfer: a source file changed while it was sent")

// ChangedError is the error of a transfer in which source files changed
// while they were sent: they were not stored (a torn copy is never taken
// for a verified one); copy them again once they are still.
type ChangedError struct{ Paths []string }

func (e *ChangedError) Error() string {
	return fmt.Sprintf("xfer: %d source file(s) changed while they were sent, not stored (copy again once they are still): %s",
		len(e.Paths), strings.Join(e.Paths, ", "))
}

func (e *ChangedError) Unwrap() error { return ErrSourceChanged }

// changed turns a transfer's result with changed files into a
// ChangedError (a transfer that failed otherwise keeps its error).
func changed(sum Summary, err error) (Summary, error) {
	if err != nil {
		return sum, err
	}
	var ps []string
	for _, e := range sum.Errors {
		if e.Changed {
			ps = append(ps, e.Path)
		}
	}
	if len(ps) > 0 {
		return sum, &ChangedError{Paths: ps}
	}
	return sum, nil
}

const maxErrors = 100

// tally collects a session's results; safe for concurrent use.
type tally struct {
	mu sync.Mutex
	s  Summary
	// live, if set, also counts what sent counts, as it goes (a Server's
	// counters, counters.go).
	live *atomic.Uint64
}

func (t *tally) file(size, kept int64) {
	t.mu.Lock()
	t.s.Files++
	t.s.Bytes += size
	t.s.Kept += kept
	t.mu.Unlock()
}

func (t *tally) dir() {
	t.mu.Lock()
	t.s.Dirs++
	t.mu.Unlock()
}

func (t *tally) sent(n int64) {
	t.mu.Lock()
	t.s.Sent += n
	t.mu.Unlock()
	if t.live != nil && n > 0 {
		t.live.Add(uint64(n))
	}
}

func (t *tally) failed(path, why string) { t.fail(FileError{Path: path, Error: why}) }

func (t *tally) fail(e FileError) {
	t.mu.Lock()
	t.s.Failed++
	if len(t.s.Errors) < maxErrors {
		t.s.Errors = append(t.s.Errors, e)
	}
	t.mu.Unlock()
}

func (t *tally) summary() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	s.Errors = append([]FileError(nil), s.Errors...)
	return s
}
