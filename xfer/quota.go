package xfer

import (
	"fmt"
	"sync"
)

// Quotas bound what a service stores: Config.Quota for all its clients
// together, Config.UserQuota for each user (Config.User names the user of
// a connection). They count the bytes of file data the service stored
// since it started (not what the served file system held before, and
// not persisted across restarts): a file's size is charged when the
// receiver asks for its data, less what a partial or whole file from an
// earlier attempt already holds, and given back if the file fails and its
// partial file is removed. A put whose plan exceeds what is left is
// refused before any data flows (a resumed one is checked file by file,
// since much of it may be there already); a sender whose files add up to
// more than it planned is stopped at the file that would exceed the quota.
// The receiver ends the session with a QuotaError and tells the sender
// why (mAbort); the service logs it.

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

// counter is a quota: how much of limit is used.
type counter struct {
	who   string
	limit int64
	mu    sync.Mutex
	used  int64
}

// quotas are a service's counters: its own and each user's.
type quotas struct {
	all       *counter // nil: no service quota
	userLimit int64    // 0: no user quotas
	mu        sync.Mutex
	users     map[string]*counter
}

// charge returns the account of a session of user ("" when connections
// carry no user: only the service quota applies); nil without quotas.
func (q *quotas) charge(user string) *charge {
	c := &charge{}
	if q.all != nil {
		c.cs = append(c.cs, q.all)
	}
	if q.userLimit > 0 && user != "" {
		q.mu.Lock()
		u := q.users[user]
		if u == nil {
			u = &counter{who: "user " + user + "'s", limit: q.userLimit}
			if q.users == nil {
				q.users = map[string]*counter{}
			}
			q.users[user] = u
		}
		q.mu.Unlock()
		c.cs = append(c.cs, u)
	}
	if len(c.cs) == 0 {
		return nil
	}
	return c
}

// charge is one session's account: the counters it draws on, the
// service's first. A nil charge allows everything.
type charge struct{ cs []*counter }

// plan checks a sender's plan of size bytes against what is left.
func (c *charge) plan(size uint64, resume bool) error {
	if c == nil || resume {
		return nil
	}
	return c.take(size, "", false)
}

// reserve charges n bytes for the file path, or refuses them all.
func (c *charge) reserve(n uint64, path string) error {
	if c == nil || n == 0 {
		return nil
	}
	return c.take(n, path, true)
}

func (c *charge) take(n uint64, path string, keep bool) error {
	for _, k := range c.cs {
		k.mu.Lock()
		defer k.mu.Unlock()
	}
	for _, k := range c.cs {
		if left := k.limit - k.used; n > uint64(max(left, 0)) {
			return &QuotaError{Who: k.who, Quota: k.limit, Left: max(left, 0), Want: int64(min(n, 1<<62)), Path: path}
		}
	}
	if keep {
		for _, k := range c.cs {
			k.used += int64(n)
		}
	}
	return nil
}

// refund gives n bytes back.
func (c *charge) refund(n uint64) {
	if c == nil || n == 0 {
		return
	}
	for _, k := range c.cs {
		k.mu.Lock()
		k.used = max(k.used-int64(n), 0)
		k.mu.Unlock()
	}
}

// reserve charges what f will add to the file system: its size, less
// what the receiver already holds of it.
func (r *receiver) reserve(f *rfile) error {
	held := min(uint64(len(f.have))*uint64(f.e.block), f.e.size)
	if err := r.quota.reserve(f.e.size-held, f.e.path); err != nil {
		return err
	}
	f.reserved = f.e.size - held
	return nil
}

// refund gives back what f reserved, once its partial file is gone.
func (r *receiver) refund(f *rfile) {
	r.quota.refund(f.reserved)
	f.reserved = 0
}
