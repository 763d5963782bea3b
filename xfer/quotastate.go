package xfer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
)

// StateFile is the file, in the served root, that keeps the per-user
// counts of Config.UserQuota across restarts. The service never serves
// it, lists it or lets a client write it: any request path or entry name
// with an element that begins with it is refused (so is its temporary
// file, StateFile+".tmp").
//
// Format (JSON, one object): {"version":1,"users":{"NAME":BYTES,...}},
// BYTES a count of at least 0. It is written as StateFile+".tmp", mode
// 0600, synced, then renamed over StateFile: a reader sees the old state
// or the new, never a torn one. It is saved at start and whenever a
// user's count changes (before the data a charge allows flows).
//
// A missing file is logged and the counts start at zero (the first start,
// or an administrator's reset). A file that cannot be read or parsed
// stops the service from starting with a QuotaStateError naming it:
// counts are never reset silently; fix the file or remove it to count
// from zero.
const StateFile = ".gridlink-quota"

// quotaState is the state file's content.
type quotaState struct {
	Version int              `json:"version"`
	Users   map[string]int64 `json:"users"`
}

// QuotaStateError is a state file that cannot be read, parsed or written.
type QuotaStateError struct {
	Path string // the file, as this host names it
	Err  error
}

func (e *QuotaStateError) Error() string {
	return fmt.Sprintf("xfer: quota state %s: %v (user quotas need it: fix it, or remove it to count from zero)", e.Path, e.Err)
}

func (e *QuotaStateError) Unwrap() error { return e.Err }

// ReservedPathError is a client path naming the quota state file.
type ReservedPathError struct{ Path string }

func (e *ReservedPathError) Error() string {
	return fmt.Sprintf("%s: reserved for the service's quota state (%s): not served or written", e.Path, StateFile)
}

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *ReservedPathError) Unwrap() error { return direct.ErrRefused }

// reserved says whether the slash-separated path p has an element that
// names the state file (or its temporary file).
func reserved(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if strings.HasPrefix(el, StateFile) {
			return true
		}
	}
	return false
}

// stateFile is where a service keeps its users' counts.
type stateFile struct {
	root *os.Root
	mu   sync.Mutex // one save at a time, the newest counts last
}

func (s *stateFile) path() string { return filepath.Join(s.root.Name(), StateFile) }

// load reads the state file; a missing one is an empty state (found false).
func (s *stateFile) load() (st quotaState, found bool, err error) {
	fi, err := s.root.Lstat(StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return quotaState{}, false, nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	var b []byte
	if err == nil {
		b, err = s.root.ReadFile(StateFile)
	}
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err = d.Decode(&st); err == nil && d.More() {
			err = errors.New("data after the state object")
		}
	}
	switch {
	case err != nil:
	case st.Version != 1:
		err = fmt.Errorf("version %d, want 1", st.Version)
	default:
		for name, n := range st.Users {
			if n < 0 || name == "" {
				err = fmt.Errorf("user %q: a count of %d bytes", name, n)
			}
		}
	}
	if err != nil {
		return quotaState{}, true, &QuotaStateError{Path: s.path(), Err: fmt.Errorf("corrupt or unreadable: %w", err)}
	}
	return st, true, nil
}

// write replaces the state file with st, atomically.
func (s *stateFile) write(st quotaState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := StateFile + ".tmp"
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		err = f.Chmod(0o600)
		if err == nil {
			_, err = f.Write(append(b, '\n'))
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = s.root.Rename(tmp, StateFile)
	}
	if err != nil {
		_ = s.root.Remove(tmp)
		return &QuotaStateError{Path: s.path(), Err: fmt.Errorf("cannot save: %w", err)}
	}
	return nil
}

// save writes the users' counts to the state file (nothing without one).
func (q *quotas) save() error {
	if q.state == nil {
		return nil
	}
	q.state.mu.Lock()
	defer q.state.mu.Unlock()
	st := quotaState{Version: 1, Users: map[string]int64{}}
	q.mu.Lock()
	for name, u := range q.users {
		st.Users[name] = u.get()
	}
	q.mu.Unlock()
	return q.state.write(st)
}

// openQuotas sets up a service's quotas on its root: the service's counter
// starts at what the tree holds, the users' at what the state file says.
func openQuotas(root *os.Root, quota, userQuota int64, logf func(string, ...any)) (*quotas, error) {
	q := &quotas{userLimit: userQuota}
	if quota > 0 {
		start := time.Now()
		size, files, skipped := measure(root)
		for i, s := range skipped {
			if i == maxLogged {
				logf("xfer: quota: %d more paths not measured", len(skipped)-i)
				break
			}
			logf("xfer: quota: not measured (not counted): %s", s)
		}
		q.all = &counter{who: "this service's", limit: quota, used: size}
		logf("xfer: quota: the served root %s holds %d bytes in %d files (measured in %.2f s): %d of this service's quota of %d bytes left",
			root.Name(), size, files, time.Since(start).Seconds(), max(quota-size, 0), quota)
	}
	if userQuota <= 0 {
		return q, nil
	}
	q.state = &stateFile{root: root}
	st, found, err := q.state.load()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(st.Users))
	for name := range st.Users {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q.user(name, st.Users[name])
	}
	if found {
		logf("xfer: quota: %s: the counts of %d users", q.state.path(), len(names))
	} else {
		logf("xfer: quota: %s: no such file: every user's count starts at zero", q.state.path())
	}
	return q, q.save() // a state that cannot be saved refuses to start
}

// measure adds up the sizes of the regular files below root (symbolic
// links not followed), listing what it could not read.
func measure(root *os.Root) (size, files int64, skipped []string) {
	_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			skipped = append(skipped, pathErr(servedTree(root), p, err))
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			skipped = append(skipped, pathErr(servedTree(root), p, err))
			return nil
		}
		size += fi.Size()
		files++
		return nil
	})
	return size, files, skipped
}
