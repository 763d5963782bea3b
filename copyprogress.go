package gridlink

// A copy's progress: its steps as typed events (CopyEvent), and a meter
// that sums them into files, bytes and a rate for displays.

import (
	"sort"
	"sync"
	"time"

	"github.com/gridlink/gridlink/xfer"
)

// CopyEvent is a step of a copy: CopyStarted, CopyPlanned, FileStarted,
// FileBytes, FileDone or DirDone.
type CopyEvent interface{ copyEvent() }

// CopyStarted is the copy starting: its node is up and attached to a hub
// (and a push's delegation ready); the transfer's events follow. A copy
// that fails before has no events.
type CopyStarted struct {
	Kind CopyKind
	Node string // the copy's node
}

// CopyPlanned is what the sender offers: Files regular files of Bytes
// bytes in all (directories apart).
type CopyPlanned struct{ Files, Bytes int64 }

// FileStarted is file ID (Path, Size bytes) starting.
type FileStarted struct {
	ID   uint32
	Path string
	Size int64
}

// FileBytes is file ID holding Done of its Size bytes (sent or kept).
type FileBytes struct {
	ID         uint32
	Path       string
	Size, Done int64
}

// FileDone is file ID done: stored and verified, or Err says why not
// (naming its path).
type FileDone struct {
	ID   uint32
	Path string
	Size int64
	Err  string
}

// DirDone is directory ID (Path) made, or there already.
type DirDone struct {
	ID   uint32
	Path string
}

func (CopyStarted) copyEvent() {}
func (CopyPlanned) copyEvent() {}
func (FileStarted) copyEvent() {}
func (FileBytes) copyEvent()   {}
func (FileDone) copyEvent()    {}
func (DirDone) copyEvent()     {}

// copyEvents turns a transfer's events into f's (nil if f is).
func copyEvents(f func(CopyEvent)) func(xfer.Event) {
	if f == nil {
		return nil
	}
	return func(e xfer.Event) {
		switch e.Kind {
		case xfer.EventPlan:
			f(CopyPlanned{Files: e.N, Bytes: e.Size})
		case xfer.EventStart:
			f(FileStarted{ID: e.ID, Path: e.Path, Size: e.Size})
		case xfer.EventBytes:
			f(FileBytes{ID: e.ID, Path: e.Path, Size: e.Size, Done: e.N})
		case xfer.EventDone:
			f(FileDone{ID: e.ID, Path: e.Path, Size: e.Size, Err: e.Err})
		case xfer.EventDir:
			f(DirDone{ID: e.ID, Path: e.Path})
		}
	}
}

// RateWindow is the span a CopyMeter's rate is measured over.
const RateWindow = 5 * time.Second

// CopyMeter sums a copy's events (Add, from any goroutine) into its
// status (Status): files and bytes done of those planned, directories,
// the files under way, and the rate over the last RateWindow of the
// times Status was asked.
type CopyMeter struct {
	mu      sync.Mutex
	files   map[uint32]*ActiveFile
	planned CopyPlanned
	done    int64 // bytes of files stored
	ndone   int64 // files finished, stored or not
	ndirs   int64
	samples []rateSample
}

type rateSample struct {
	t time.Time
	n int64
}

// ActiveFile is a file under way.
type ActiveFile struct {
	ID         uint32
	Path       string
	Size, Done int64
}

// CopyStatus is a copy's progress at a time.
type CopyStatus struct {
	Bytes, TotalBytes int64 // bytes done (stored, and of files under way), of those planned
	Files, TotalFiles int64 // files finished (stored or not), of those planned
	Dirs              int64 // directories made or there
	// Rate is the bytes per second over the last RateWindow; HasRate is
	// false until two statuses measure one.
	Rate    float64
	HasRate bool
	// ETA is the time left at Rate; HasETA is false without a rate or
	// with nothing left.
	ETA    time.Duration
	HasETA bool
	Active []ActiveFile // newest first
}

// NewCopyMeter returns a meter with nothing counted.
func NewCopyMeter() *CopyMeter { return &CopyMeter{files: map[uint32]*ActiveFile{}} }

// Add counts an event.
func (m *CopyMeter) Add(e CopyEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e := e.(type) {
	case CopyPlanned:
		m.planned = e
	case FileStarted:
		m.files[e.ID] = &ActiveFile{ID: e.ID, Path: e.Path, Size: e.Size}
	case DirDone:
		m.ndirs++
	case FileBytes:
		if f := m.files[e.ID]; f != nil {
			f.Done = e.Done
		}
	case FileDone:
		if f := m.files[e.ID]; f != nil || e.ID != 0 {
			delete(m.files, e.ID)
			m.ndone++
			if e.Err == "" {
				m.done += e.Size
			}
		}
	}
}

// Status is the progress at now, which it also samples for the rate.
func (m *CopyMeter) Status(now time.Time) CopyStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := CopyStatus{Bytes: m.done, TotalBytes: m.planned.Bytes, Files: m.ndone, TotalFiles: m.planned.Files, Dirs: m.ndirs}
	for _, f := range m.files {
		st.Bytes += f.Done
		st.Active = append(st.Active, *f)
	}
	sort.Slice(st.Active, func(i, j int) bool { return st.Active[i].ID > st.Active[j].ID })
	if st.Bytes == 0 {
		// nothing has moved yet (the connection is being set up): the
		// last such sample is where the rate will start, and there is no
		// rate before (not 0 B/s)
		m.samples = append(m.samples[:0], rateSample{now, 0})
		return st
	}
	m.samples = append(m.samples, rateSample{now, st.Bytes})
	for len(m.samples) > 2 && now.Sub(m.samples[1].t) > RateWindow {
		m.samples = m.samples[1:]
	}
	// a rate once there is one: a single sample has none (not 0 B/s)
	if s := m.samples[0]; len(m.samples) > 1 && now.Sub(s.t) > 0 {
		st.Rate, st.HasRate = float64(st.Bytes-s.n)/now.Sub(s.t).Seconds(), true
	}
	if st.Rate > 0 && st.TotalBytes > st.Bytes {
		st.ETA, st.HasETA = time.Duration(float64(st.TotalBytes-st.Bytes)/st.Rate*float64(time.Second)), true
	}
	return st
}
