package xfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/direct"
)

// Dialer opens a connection to a transfer service (a link, in gridlink).
type Dialer func(ctx context.Context) (net.Conn, error)

// Options configure a transfer. The zero value copies single files, does
// not resume from a previous run, and resumes after dropped connections.
type Options struct {
	Recursive bool // copy directory trees
	// Resume keeps what an earlier, interrupted transfer stored (partial
	// files, files already whole) where its checksums agree with the
	// source. Attempts after a dropped connection always resume.
	Resume bool
	// Retries is how many times a transfer is resumed after its connection
	// dropped (default 5; negative: never). The first attempt's dial is not
	// retried: an address that does not answer is reported at once.
	Retries int
	// Backoff is the wait before the first retry (default 1s), doubled for
	// each further one up to MaxBackoff.
	Backoff time.Duration
	// Limit bounds the file data rate in bytes per second (0: none), in
	// every direction: a put's sender (this end) keeps to it, and a get's
	// or a push's (the service) is asked to.
	Limit int64
	// Progress, if set, is called with each step (see Event).
	Progress func(Event)
	// Delegate answers a push source's request for a credential (see
	// Delegation). Nil answers nothing: pushes to sources that ask fail.
	Delegate func(ctx context.Context, target string, request []byte) ([]byte, error)
	// Logf, if set, logs retries.
	Logf func(format string, args ...any)
	// Hold, if set, pauses and resumes the transfer (see Hold): a put's
	// sender here, a push's at the source. A get refuses one
	// (ErrHoldGet).
	Hold *Hold
}

// MaxBackoff bounds the wait between retries.
const MaxBackoff = 30 * time.Second

// RefusedError is a request the service refused, or a failure it reported.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *RefusedError) Unwrap() error { return direct.ErrRefused }

// Put copies local files and, with Recursive, directories (paths of this
// host) to dest at the service dial reaches.
func Put(ctx context.Context, dial Dialer, paths []string, dest string, o Options) (Summary, error) {
	rel := make([]string, len(paths))
	for i, p := range paths {
		var err error
		if rel[i], err = localRel(p); err != nil {
			return Summary{}, err
		}
	}
	return put(ctx, dial, localTree{dir: "/"}, rel, path.Base, dest, o)
}

// put sends paths of t to the service dial reaches.
func put(ctx context.Context, dial Dialer, t tree, paths []string, top func(string) string, dest string, o Options) (Summary, error) {
	names, err := sourceNames(paths, top)
	if err != nil {
		return Summary{}, err
	}
	req := request{op: opPut, dest: dest, paths: names, recursive: o.Recursive, resume: o.Resume, limit: uint64(max(o.Limit, 0))}
	return changed(retry(ctx, o, func(ctx context.Context, ep *endpoint, tl *tally) error {
		pl, err := open(ep, req)
		if err != nil {
			return err
		}
		if pl == placeInto {
			req.flags = flagInto
		} else if pl == placeAs {
			req.flags = flagAs
		}
		return send(ctx, ep, t, paths, o.Recursive, top, &observer{f: o.Progress}, o.Limit, o.Hold, tl)
	}, &req, dial))
}

// Get copies paths of the service dial reaches (relative to its root) to
// dest, a path of this host: into it if it is a directory, else as it.
// Whatever the service sends, nothing is written outside dest (the named
// file, or the tree below the named directory): an entry whose name
// leaves it ends the transfer with an UnsafePathError, and one that meets
// a symbolic link pointing out of it fails alone.
func Get(ctx context.Context, dial Dialer, paths []string, dest string, o Options) (Summary, error) {
	if o.Hold != nil {
		return Summary{}, ErrHoldGet
	}
	if _, err := localRel(dest); err != nil {
		return Summary{}, err
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return Summary{}, err
	}
	d, err := localDest(abs, o.Resume)
	if err != nil {
		return Summary{}, err
	}
	if d.place == placeInto && o.Logf != nil {
		if n := unfinishedNote(localTree{dir: "/"}, strings.TrimPrefix(abs, "/")); n != "" {
			o.Logf("xfer: %s", n)
		}
	}
	defer d.close()
	d.recursive, d.asked = o.Recursive, askedOf(paths)
	if d.place == placeAs && len(paths) > 1 {
		return Summary{}, fmt.Errorf("%s: not a directory, and there are several sources", dest)
	}
	req := request{op: opGet, dest: dest, paths: paths, recursive: o.Recursive, resume: o.Resume, limit: uint64(max(o.Limit, 0))}
	var made madeSet // directories made by one attempt, finished by a later one
	return changed(retry(ctx, o, func(ctx context.Context, ep *endpoint, tl *tally) error {
		if _, err := open(ep, req); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { ep.c.Close() })
		defer stop()
		return receive(ep, d, req.resume, nil, &made, nil, &observer{f: o.Progress}, tl, "")
	}, &req, dial))
}

// Push has the service dial reaches (the source) send its paths to dest
// at target's service: the data flows from source to target; this end
// answers the source's authorization request (Options.Delegate) and
// watches. The summary is the source's.
func Push(ctx context.Context, dial Dialer, paths []string, target, dest string, l Link, o Options) (Summary, error) {
	req := request{op: opPush, dest: dest, paths: paths, target: target, streams: uint32(max(l.Streams, 0)),
		compress: l.Compress, recursive: o.Recursive, resume: o.Resume, limit: uint64(max(o.Limit, 0))}
	var result Summary
	sum, err := retry(ctx, o, func(ctx context.Context, ep *endpoint, tl *tally) error {
		if _, err := open(ep, req); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { ep.c.Close() })
		defer stop()
		typ, p, err := ep.recv()
		if err != nil {
			return err
		}
		if typ != mDelegate {
			return fmt.Errorf("%w: message %d instead of a delegation request", errFrame, typ)
		}
		ask, err := decodeBlob(p)
		if err != nil {
			return err
		}
		var answer []byte
		switch {
		case o.Delegate != nil:
			if answer, err = o.Delegate(ctx, target, ask); err != nil {
				return &RefusedError{"delegation to the source: " + err.Error()}
			}
		case len(ask) > 0:
			return &RefusedError{"the source asks for a delegated credential, and none is configured here"}
		}
		if err := ep.sendNow(mDelegate, enc(nil).bytes(answer)); err != nil {
			return err
		}
		if o.Hold != nil { // the source starts unpaused; tell it every change from here
			holds := make(chan struct{})
			defer close(holds)
			go sendHolds(ep, o.Hold, holds)
		}
		for {
			typ, p, err := ep.recv()
			if err != nil {
				return err
			}
			switch typ {
			case mEvent:
				e, err := decodeEvent(p)
				if err != nil {
					return err
				}
				if o.Progress != nil {
					o.Progress(e)
				}
			case mResult:
				if result, err = decodeSummary(p); err != nil {
					return err
				}
				if result.Error != "" {
					return &RefusedError{"at the source: " + result.Error}
				}
				return nil
			default:
				return fmt.Errorf("%w: message %d from a push source", errFrame, typ)
			}
		}
	}, &req, dial)
	if result.Attempts > 0 {
		result.Seconds, result.Mbps = sum.Seconds, mbps(result.Bytes, sum.Seconds)
		sum = result
	}
	return changed(sum, err)
}

// open sends the request and reads the answer: the placement at a
// receiving service.
func open(ep *endpoint, req request) (uint8, error) {
	if err := ep.sendNow(mRequest, req.encode()); err != nil {
		return 0, err
	}
	typ, p, err := ep.recv()
	if err != nil {
		return 0, err
	}
	switch typ {
	case mAccept:
		return decodeAccept(p)
	case mRefuse:
		why, err := decodeText(p)
		if err != nil {
			return 0, err
		}
		return 0, &RefusedError{why}
	}
	return 0, fmt.Errorf("%w: message %d instead of an answer to a request", errFrame, typ)
}

// retry runs a session, and after a dropped connection runs it again,
// resuming, with exponential backoff. Its summary counts the data sent in
// all attempts; the rest is the last attempt's.
func retry(ctx context.Context, o Options, session func(context.Context, *endpoint, *tally) error, req *request, dial Dialer) (Summary, error) {
	retries := o.Retries
	if retries == 0 {
		retries = 5
	}
	retry := backoff.ExponentialBackOff{InitialInterval: o.Backoff, Multiplier: 2, MaxInterval: MaxBackoff}
	if retry.InitialInterval <= 0 {
		retry.InitialInterval = time.Second
	}
	start := time.Now()
	var sent int64
	for attempt := 1; ; attempt++ {
		var tl tally
		c, err := dial(ctx)
		if err == nil {
			err = session(ctx, newEndpoint(c), &tl)
			c.Close()
		} else if attempt == 1 {
			return Summary{Attempts: 1}, err
		}
		s := tl.summary()
		sent += s.Sent
		s.Sent, s.Attempts = sent, attempt
		s.Seconds = time.Since(start).Seconds()
		s.Mbps = mbps(s.Bytes, s.Seconds)
		if err == nil || !retryable(err) || attempt > retries || ctx.Err() != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return s, err
		}
		wait := retry.NextBackOff()
		if o.Logf != nil {
			o.Logf("xfer: %v; resuming in %v (attempt %d of %d)", err, wait, attempt+1, retries+1)
		}
		req.resume = true
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
}

// retryable says whether an error is a dropped connection (or one that
// could not be set up again), not a refusal or a protocol violation.
func retryable(err error) bool {
	var re *RefusedError
	return !errors.As(err, &re) && !errors.Is(err, errFrame) && !errors.Is(err, context.Canceled)
}

func mbps(bytes int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(bytes) * 8 / secs / 1e6
}

// localRel turns a path of this host into the slash-separated path
// relative to "/" that localTree{"/"} reads.
func localRel(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rel := strings.TrimPrefix(filepath.ToSlash(abs), "/")
	if rel == "" {
		return "", fmt.Errorf("%s: copying the whole file system is not supported", p)
	}
	return rel, nil
}
