package xfer

import (
	"fmt"
	"path"
	"sync"

	"github.com/gridlink/gridlink/direct"
)

// Quotas bound what a service stores: Config.Quota for all its clients
// together, Config.UserQuota for each user (Config.User names the user of
// a connection).
//
// The service's quota counts what the served tree holds: the apparent
// size of every regular file below the root, measured when the service
// starts (NewServer walks the root and logs what it found and how long
// it took), then kept up to date as the service stores files: a file's
// size is charged when the receiver asks for its data, less what a
// partial or whole file from an earlier attempt already holds; given back
// if the file fails and its partial file is removed; and once stored, the
// file it replaced (if any) is given back, so a replaced file counts its
// new size minus the old one. Files that change beside the service (an
// administrator's) are seen at its next start.
//
// A user's quota counts the bytes the user's uploads added to the tree,
// and persists across restarts in the state file (quotastate.go). The
// service does not record who stored each file, so it approximates: an
// upload that replaces a file is charged to its uploader as its new size
// less the old one's, never below zero, and the replaced bytes stay
// charged to whoever stored them. So a user's count is never less than
// what the user's uploads grew the tree by; re-sending one's own file
// costs nothing more; nothing is given back when a file is removed beside
// the service (an administrator lowers counts by editing the state file
// while the service is stopped).
//
// A put whose plan exceeds what is left (plus the size of the file it
// replaces, for a put of one file as a file that is there) is refused
// before any data flows; a resumed one is checked file by file, since
// much of it may be there already (so a tree sent again over itself near
// a quota goes with --resume). Each file is checked when it is offered,
// against what is left plus the size of the file it replaces, and a
// sender whose files add up to more than it planned is stopped at the
// file that would exceed the quota. The receiver ends the
// session with a QuotaError and tells the sender why (mAbort); the
// service logs it. Free space is checked too, whatever the quotas (see
// space.go).

// QuotaError is a put refused for a quota.
type QuotaError struct {
	Who   string // "this service" or "user NAME"
	Quota int64  // bytes
	Left  int64  // bytes left of it
	Want  int64  // bytes asked for
	Path  string // the file that would exceed it; "" for the plan
}

func (e *QuotaError) Error() string {
	what := "the transfer's"
	if e.Path != "" {
		what = e.Path + ":"
	}
	return fmt.Sprintf("xfer: quota: %s %d bytes exceed the %d bytes left of %s quota of %d bytes: refused", what, e.Want, e.Left, e.Who, e.Quota)
}

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *QuotaError) Unwrap() error { return direct.ErrRefused }

// counter is a quota: how much of limit is used.
type counter struct {
	who   string
	limit int64
	mu    sync.Mutex
	used  int64
}

func (k *counter) get() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.used
}

// quotas are a service's counters: its own and each user's, and the state
// file that keeps the users' across restarts.
type quotas struct {
	all       *counter // nil: no service quota
	userLimit int64    // 0: no user quotas
	mu        sync.Mutex
	users     map[string]*counter
	state     *stateFile // nil: none (no user quotas)
}

// charge returns the account of a session of user ("" when connections
// carry no user: only the service quota applies); nil without quotas.
func (q *quotas) charge(user string) *charge {
	c := &charge{all: q.all}
	if q.userLimit > 0 && user != "" {
		c.user, c.state = q.user(user, 0), q
	}
	if c.all == nil && c.user == nil {
		return nil
	}
	return c
}

// user returns user's counter, made with used bytes if it is new.
func (q *quotas) user(name string, used int64) *counter {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.users[name]
	if u == nil {
		u = &counter{who: "user " + name + "'s", limit: q.userLimit, used: used}
		if q.users == nil {
			q.users = map[string]*counter{}
		}
		q.users[name] = u
	}
	return u
}

// charge is one session's account: the service's counter and the user's
// (either nil). A nil charge allows everything.
type charge struct {
	all, user *counter
	state     *quotas // to save the user's count; nil without a user
}

func (c *charge) counters() []*counter {
	var cs []*counter
	for _, k := range []*counter{c.all, c.user} {
		if k != nil {
			cs = append(cs, k)
		}
	}
	return cs
}

// plan checks a sender's plan of size bytes against what is left, and
// the bytes of a file it replaces (old).
func (c *charge) plan(size uint64, resume bool, old uint64) error {
	if c == nil || resume {
		return nil
	}
	return c.take(size, "", false, old)
}

// reserve charges n bytes for the file path, or refuses them all; old is
// the size of the file it replaces, which its storing gives back
// (replaced): n may exceed what is left by as much. A user's count is
// saved before the data flows (a refusal if it cannot be).
func (c *charge) reserve(n uint64, path string, old uint64) error {
	if c == nil || n == 0 {
		return nil
	}
	if err := c.take(n, path, true, old); err != nil {
		return err
	}
	if err := c.save(); err != nil {
		c.refund(n)
		return err
	}
	return nil
}

func (c *charge) take(n uint64, path string, keep bool, old uint64) error {
	cs := c.counters()
	for _, k := range cs {
		k.mu.Lock()
		defer k.mu.Unlock()
	}
	for _, k := range cs {
		if left := k.limit - k.used; n > uint64(max(left, 0))+min(old, n) {
			return &QuotaError{Who: k.who, Quota: k.limit, Left: max(left, 0), Want: int64(min(n, 1<<62)), Path: path}
		}
	}
	if keep {
		for _, k := range cs {
			k.used += int64(n)
		}
	}
	return nil
}

// refund gives n bytes back to the service and the user.
func (c *charge) refund(n uint64) {
	if c == nil || n == 0 {
		return
	}
	c.give(c.all, n)
	if c.user != nil {
		c.give(c.user, n)
		_ = c.save() // a count saved too high only errs on the safe side
	}
}

// replaced gives back a file of old bytes that a stored file of reserved
// charged bytes replaced: all of it to the service, at most reserved to
// the user (see the approximation above).
func (c *charge) replaced(old, reserved uint64) {
	if c == nil || old == 0 {
		return
	}
	c.give(c.all, old)
	if c.user != nil && reserved > 0 {
		c.give(c.user, min(old, reserved))
		_ = c.save()
	}
}

// freed gives the service back n bytes a receiver removed (an old
// partial file), which no user's count is known to hold.
func (c *charge) freed(n int64) {
	if c != nil && n > 0 {
		c.give(c.all, uint64(n))
	}
}

func (c *charge) give(k *counter, n uint64) {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.used = max(k.used-int64(min(n, 1<<62)), 0)
	k.mu.Unlock()
}

func (c *charge) save() error {
	if c.state == nil {
		return nil
	}
	return c.state.save()
}

// reserve charges what f will add to the file system: its size, less
// what the receiver already holds of it.
func (r *receiver) reserve(f *rfile) error {
	held := min(uint64(len(f.have))*uint64(f.e.block), f.e.size)
	if err := fits(f.t, path.Dir(f.target), f.e.size-held, f.e.path); err != nil {
		return err
	}
	if err := r.quota.reserve(f.e.size-held, f.e.path, fileSize(f.t, f.target)); err != nil {
		return err
	}
	f.reserved = f.e.size - held
	return nil
}

// fileSize is the size of name in t if it is a regular file, else 0.
func fileSize(t tree, name string) uint64 {
	if fi, err := t.Lstat(name); err == nil && fi.Mode().IsRegular() {
		return uint64(fi.Size())
	}
	return 0
}

// refund gives back what f reserved, once its partial file is gone.
func (r *receiver) refund(f *rfile) {
	r.quota.refund(f.reserved)
	f.reserved = 0
}
