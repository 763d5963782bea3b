package gridlink

// Copies between transfer services (gridlink serve), what gridlink cp
// does: its arguments read scp's way (PlanCopy), the way the data goes
// (put, get, or a third-party push between two services), the node it
// runs, the delegation of a push (delegate.go) and its progress as events
// (copyprogress.go).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/xfer"
)

// TransferPort is the virtual port of transfer services unless told
// otherwise.
const TransferPort = xfer.Port

// CopySummary is what a copy did (files, bytes, time, failures).
type CopySummary = xfer.Summary

// CopyKind says which way a copy's data goes.
type CopyKind uint8

const (
	// CopyPut sends local files to a service.
	CopyPut CopyKind = iota + 1
	// CopyGet fetches a service's files here.
	CopyGet
	// CopyPush sends from one service to another (a third-party
	// transfer): the data flows between them, this end watches.
	CopyPush
)

// CopyPlan is a copy's arguments read scp's way: NAME:PATH is PATH under
// the root of node NAME's transfer service, anything else a local path.
type CopyPlan struct {
	Kind    CopyKind
	SrcNode string   // the sources' node ("" for CopyPut)
	Srcs    []string // local paths (CopyPut), else paths of SrcNode's served root
	DstNode string   // the destination's node ("" for CopyGet)
	Dst     string   // a local path (CopyGet), else a path of DstNode's served root
}

// CopyArgError is a copy's arguments that name no copy: sources on
// different nodes (Arg the first that differs), or nothing remote (Arg "").
type CopyArgError struct {
	Arg    string
	Reason string
}

func (e *CopyArgError) Error() string {
	if e.Arg == "" {
		return e.Reason
	}
	return e.Arg + ": " + e.Reason
}

// PlanCopy reads a copy's sources and destination: all sources on one
// node or all local, and at least one end remote.
func PlanCopy(srcs []string, dst string) (CopyPlan, error) {
	p := CopyPlan{}
	dnode, dpath, dremote := splitRemote(dst)
	for i, a := range srcs {
		n, path, r := splitRemote(a)
		switch {
		case i > 0 && (r != (p.SrcNode != "") || n != p.SrcNode):
			return CopyPlan{}, &CopyArgError{Arg: a, Reason: "all sources must be on one node, or all local"}
		case r:
			p.SrcNode = n
		}
		p.Srcs = append(p.Srcs, path)
	}
	switch {
	case p.SrcNode == "" && !dremote:
		return CopyPlan{}, &CopyArgError{Reason: "neither the sources nor the destination name a node (NAME:PATH): use cp"}
	case p.SrcNode == "":
		p.Kind, p.DstNode, p.Dst = CopyPut, dnode, dpath
	case !dremote:
		p.Kind, p.Dst = CopyGet, dst
	default:
		p.Kind, p.DstNode, p.Dst = CopyPush, dnode, dpath
	}
	return p, nil
}

// splitRemote splits an scp-style argument: NAME:PATH names a node's path
// (a path of the served root; "" is the root), anything else is local (a
// colon after a slash does not count: ./a:b is local).
func splitRemote(arg string) (node, p string, ok bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.Contains(arg[:i], "/") {
		return "", arg, false
	}
	p = arg[i+1:]
	if p == "" {
		p = "."
	}
	return arg[:i], p, true
}

// CopyConfig configures a copy. The zero value copies single files over
// one encrypted stream to and from port 2811, resuming after dropped
// connections 5 times.
type CopyConfig struct {
	// Node is the node the copy runs: started by Copy (StartAttached: with
	// a proxy file, an identity of its own, so copies run beside the
	// user's agent and each other), attached to a hub (it waits as long as
	// ctx allows, 30 s at most), closed at its end.
	Node Config
	// ProxyFile is the caller's proxy credential file (gridlink proxy
	// init), which a push (CopyPush) in a grid with a CA delegates from:
	// the source service gets a proxy of it restricted to the target's
	// transfer service at the target node alone (as this copy's node
	// resolves it). A push in such a grid without one fails with
	// ErrNoDelegator (a node's certificate cannot delegate); an open grid
	// needs none.
	ProxyFile string
	Port      int         // virtual port of the transfer services (0: TransferPort)
	Link      LinkOptions // streams (AutoStreams), compression, authenticated plain
	Recursive bool        // copy directory trees
	// Resume keeps what an earlier, interrupted copy stored where its
	// checksums agree.
	Resume bool
	// Retries is how many times the copy resumes after a dropped
	// connection (0: 5; negative: never).
	Retries int
	// ResumeTimeout makes the copy's links resumable (it sets
	// Link.Resume and Link.Config.ResumeTimeout): a link survives the
	// death of the connections beneath it (a hub on the path, a cut),
	// resending what they carried over one set up again by whatever
	// method works then, for up to this long without any (the service
	// may agree to less), before it fails naming what died and when (and
	// the copy retries, Retries). 0: DefaultResumeTimeout (30 s);
	// negative: links are not resumable.
	ResumeTimeout time.Duration
	// Limit bounds the file data rate, bytes per second, whichever end
	// sends (0: none).
	Limit int64
	// Progress, if set, is called with each step (see CopyEvent), from
	// one goroutine at a time.
	Progress func(CopyEvent)
	// Logf, if set, logs retries.
	Logf func(format string, args ...any)
	// Hold, if set, pauses and resumes the copy while it runs (see
	// CopyHold): a put's sender here, a push's at the source service.
	// A get cannot be paused: Copy fails at once with ErrCopyHoldGet.
	Hold *CopyHold
}

// CopyHold pauses a copy (Pause) and lets it go on (Resume): the sender
// of the file data holds its next block, so the bytes stored are the
// same as without the pause; the link stays open. Cancelling the copy's
// context ends it, paused or not. The zero value is not paused.
type CopyHold = xfer.Hold

// ErrCopyHoldGet is a get given a CopyHold: the service sends a get's
// data, and cannot be told to hold it; cancel it instead.
var ErrCopyHoldGet = xfer.ErrHoldGet

// CopyResult is what a copy did, and over what.
type CopyResult struct {
	CopySummary
	Method  string // how the last link was set up (direct, reverse, splice, routed)
	Streams int    // the last link's stream count when it closed
	// Interrupted: the copy failed after it began (ctx ended, or a retry
	// ran); what was stored stays where it goes, the same copy with
	// Resume continues it.
	Interrupted bool
}

// CopyReport is a copy's result (and its error, if it failed) in the
// shape `gridlink cp --json` prints (status.Copy).
func CopyReport(res CopyResult, err error) status.Copy {
	sum := res.CopySummary
	r := status.Copy{Files: sum.Files, Dirs: sum.Dirs, Failed: sum.Failed, Bytes: sum.Bytes, SentBytes: sum.Sent, KeptBytes: sum.Kept,
		Attempts: sum.Attempts, Seconds: sum.Seconds, MbitPerS: sum.Mbps, Method: res.Method, Streams: res.Streams, PushError: sum.Error}
	for _, e := range sum.Errors {
		r.Errors = append(r.Errors, status.CopyError{Path: e.Path, Error: e.Error, Changed: e.Changed})
	}
	if err != nil {
		r.Failure = err.Error()
	}
	return r
}

// FailedEntriesError is a copy that ran through but did not store some
// entries (CopySummary.Errors says which and why).
type FailedEntriesError struct{ Failed, Total int }

func (e *FailedEntriesError) Error() string {
	return fmt.Sprintf("%d of %d entries failed", e.Failed, e.Total)
}

// Copy runs plan: it starts cc.Node, delegates for a push, copies, and
// closes the node.
func Copy(ctx context.Context, cc CopyConfig, plan CopyPlan) (CopyResult, error) {
	port := cc.Port
	if port == 0 {
		port = TransferPort
	}
	if cc.Hold != nil && plan.Kind == CopyGet {
		return CopyResult{}, ErrCopyHoldGet
	}
	var deleg *proxy.Credential
	if plan.Kind == CopyPush && gridHasCA(cc.Node) { // the source may act for us
		if cc.ProxyFile == "" {
			return CopyResult{}, ErrNoDelegator
		}
		var err error
		if deleg, err = proxy.Load(cc.ProxyFile); err != nil {
			return CopyResult{}, err
		}
	}
	node, err := startCopyNode(ctx, cc.Node)
	if err != nil {
		return CopyResult{}, err
	}
	defer node.Close()
	o := xfer.Options{Recursive: cc.Recursive, Resume: cc.Resume, Retries: cc.Retries, Limit: cc.Limit,
		Progress: copyEvents(cc.Progress), Logf: cc.Logf, Hold: cc.Hold}
	if plan.Kind == CopyPush {
		if o.Delegate, err = delegateTo(ctx, node, deleg, serviceAddr(plan.DstNode, port)); err != nil {
			return CopyResult{}, err
		}
	}
	if cc.Progress != nil {
		cc.Progress(CopyStarted{Kind: plan.Kind, Node: node.Name()})
	}
	var seen linkSeen
	lo := cc.Link
	if cc.ResumeTimeout >= 0 {
		lo.Resume, lo.Config.ResumeTimeout = true, cc.ResumeTimeout
	}
	dialer := func(name string) xfer.Dialer {
		return func(ctx context.Context) (net.Conn, error) {
			c, err := dialService(ctx, node, serviceAddr(name, port), lo)
			if err != nil {
				return nil, err
			}
			return &watchedLink{Conn: c.(*link.Conn), seen: &seen}, nil
		}
	}
	var sum xfer.Summary
	switch plan.Kind {
	case CopyPut:
		sum, err = xfer.Put(ctx, dialer(plan.DstNode), plan.Srcs, plan.Dst, o)
	case CopyGet:
		sum, err = xfer.Get(ctx, dialer(plan.SrcNode), plan.Srcs, plan.Dst, o)
	case CopyPush:
		l := xfer.Link{Streams: cc.Link.Streams, Compress: cc.Link.Compression.String()}
		if l.Streams == link.Auto {
			l.Streams = 0
		}
		sum, err = xfer.Push(ctx, dialer(plan.SrcNode), plan.Srcs, serviceAddr(plan.DstNode, port), plan.Dst, l, o)
	default:
		return CopyResult{}, &CopyArgError{Reason: fmt.Sprintf("no such kind of copy: %d", plan.Kind)}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	res := CopyResult{CopySummary: sum, Method: seen.method, Streams: seen.streams,
		Interrupted: err != nil && (ctx.Err() != nil || sum.Attempts > 1)}
	if err == nil && sum.Failed > 0 {
		err = &FailedEntriesError{Failed: sum.Failed, Total: sum.Failed + sum.Files + sum.Dirs}
	}
	return res, err
}

// startCopyNode starts the node of a copy (and a push's transient node),
// which needs a hub (StartAttached).
func startCopyNode(ctx context.Context, cfg Config) (*Node, error) { return StartAttached(ctx, cfg) }

// gridHasCA says whether cfg's node is in a grid with a CA.
func gridHasCA(cfg Config) bool {
	return cfg.Credentials.CA != "" || cfg.creds != nil && cfg.creds.Trust() != nil
}

// gridTrust is the trust node judges peers by: its grid CA's; nil in an
// open grid.
func gridTrust(node *Node) *pki.Trust { return node.creds.Trust() }

// dialService dials a link, waiting up to 15 s for the hubs to learn the
// name.
func dialService(ctx context.Context, node *Node, addr string, o link.Options) (net.Conn, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c, err := link.Dial(dctx, node.n, addr, o)
		cancel()
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, hub.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serviceAddr is NAME[@HUB] with port added to NAME unless it has one.
func serviceAddr(addr string, port int) string {
	host := addr
	if i := strings.IndexByte(host, '@'); i >= 0 {
		host = host[:i]
	}
	if strings.Contains(host, ":") {
		return addr
	}
	return strings.Replace(addr, host, host+":"+strconv.Itoa(port), 1)
}

// linkSeen is what the links of a copy were: the last one's setup method
// and its stream count when it closed.
type linkSeen struct {
	mu      sync.Mutex
	method  string
	streams int
}

type watchedLink struct {
	*link.Conn
	seen *linkSeen
}

func (w *watchedLink) Close() error {
	w.seen.mu.Lock()
	w.seen.method, w.seen.streams = string(w.Method()), w.Stats().Streams
	w.seen.mu.Unlock()
	return w.Conn.Close()
}
