package link

import (
	"fmt"
	"net"
	"time"
)

// Config configures a Writer or a Reader. The zero value works.
type Config struct {
	// BlockSize is the most a Writer puts in one block (default 256 KiB,
	// at most MaxBlock). A Write of fewer bytes sends a smaller block: the
	// Writer does not hold bytes back (wrap it in a bufio.Writer to
	// gather small writes).
	BlockSize int
	// SendQueue bounds the bytes a Writer holds that no connection has
	// taken yet (default 4 MiB, at least BlockSize): it queues at most
	// SendQueue/BlockSize blocks, and Write blocks while the queue is
	// full. Each connection also holds the one block it is sending.
	SendQueue int
	// ReorderBuffer bounds what a Reader holds: blocks received and not
	// yet read, each counted as its payload plus BlockCost bytes (default
	// 16 MiB, at least 2*(MaxBlock+BlockCost)). Of it, MaxBlock+BlockCost
	// is kept for the block the stream needs next (see Reader). A Reader
	// with many connections raises its bound to ReorderPerStream for each
	// connection it has had at once: blocks arrive out of order by about a
	// block per connection, and a bound below that stalls the fast
	// connections while the next block crawls along a slow one.
	ReorderBuffer int
	// Compression says how a Writer compresses data blocks (default
	// CompressOff). Compressing, a Writer runs GOMAXPROCS workers and each
	// queued block also keeps room for its compressed form (see Writer).
	// A Reader ignores it: it decodes whatever codec a block says.
	Compression Compression
	// AbortTimeout bounds how long a Writer tries to send abort blocks
	// when it gives up (default 1s).
	AbortTimeout time.Duration
	// Retired, if set, is called by a Reader with the connection (as given
	// to AddStream) on which the sender sent a retire block, before the
	// Reader closes it: a two-way link retires its own sending half of
	// that connection in answer.
	Retired func(net.Conn)
	// ResendBuffer, on a resumable link (resume.go), bounds what its
	// Writer keeps until the peer acknowledges it: queued, in flight and
	// not yet read by the peer's application, each block counted as its
	// stream bytes plus BlockCost (default 128 MiB, at least
	// 2*(MaxBlock+BlockCost), at most MaxWindow). The Writer keeps only
	// what the path and the peer hold, so this is a cap, not an
	// allocation; Write blocks, never drops, while it is full. It is also
	// the window: the peer's Reader holds at most as much, whatever the
	// number of connections. Each end proposes its own in the hello and
	// the link uses the smaller for both directions. The Writer starts
	// with 16 MiB of it (or all, if less) and grows its window up to it
	// while the window holds the link back and more room raises the rate
	// (writer_resume.go): a path that needs it gets it, a slow reader
	// does not. The window bounds the throughput to window per round
	// trip, and on a path where connections stall unevenly (a loss on one
	// of a hub trunk's connections) the blocks delivered after a late one
	// wait in it too: 16 MiB held routed links at 40 ms to two thirds of
	// what they carry without resuming, 64 MiB at 160 ms to 83%
	// (BENCHMARKS.md). Memory: the Writer keeps at most its window, the
	// peer's Reader holds at most the agreed one (a routed link's eight
	// circuits may hold as much: 16 MiB each).
	ResendBuffer int
	// ResumeTimeout is how long a resumable link lives without any
	// connection before it fails with a *LostError (default 30s, at most
	// MaxResumeTimeout, rounded to milliseconds). Each end proposes its
	// own in the hello and the link uses the smaller on both ends: a
	// dialler may shorten an acceptor's, not lengthen it.
	ResumeTimeout time.Duration

	resume *resumeHooks // set by a resumable link's session
}

// BlockCost is what a Reader counts for each block it holds, on top of
// its payload, so that many tiny blocks cannot exceed the reorder buffer.
const BlockCost = 64

// ReorderPerStream is what a Reader's bound grows by for each connection
// beyond ReorderBuffer/ReorderPerStream (see Config.ReorderBuffer): two
// blocks of the default size.
const ReorderPerStream = 2 * defaultBlockSize

const (
	defaultBlockSize     = 256 << 10
	defaultSendQueue     = 4 << 20
	defaultReorderBuffer = 16 << 20
	reserve              = MaxBlock + BlockCost
	defaultResendBuffer  = 128 << 20
)

// DefaultResumeTimeout is Config.ResumeTimeout's default.
const DefaultResumeTimeout = 30 * time.Second

// MaxResumeTimeout bounds Config.ResumeTimeout.
const MaxResumeTimeout = 24 * time.Hour

// maxTimeoutMs is MaxResumeTimeout in a hello's milliseconds.
const maxTimeoutMs = uint32(MaxResumeTimeout / time.Millisecond)

// MaxWindow bounds Config.ResendBuffer, and so the window a peer may ask
// for in a resumable link's hello.
const MaxWindow = 1 << 30

// minWindow is the least Config.ResendBuffer: two blocks of the largest
// size, so that a Writer always has one to send while one waits for its
// ack.
const minWindow = 2 * reserve

func (c Config) withDefaults() Config {
	if c.BlockSize <= 0 {
		c.BlockSize = defaultBlockSize
	}
	c.BlockSize = min(c.BlockSize, MaxBlock)
	if c.SendQueue <= 0 {
		c.SendQueue = defaultSendQueue
	}
	c.SendQueue = max(c.SendQueue, c.BlockSize)
	if c.ReorderBuffer <= 0 {
		c.ReorderBuffer = defaultReorderBuffer
	}
	c.ReorderBuffer = max(c.ReorderBuffer, 2*reserve)
	if c.AbortTimeout <= 0 {
		c.AbortTimeout = time.Second
	}
	if c.ResendBuffer <= 0 {
		c.ResendBuffer = defaultResendBuffer
	}
	c.ResendBuffer = min(max(c.ResendBuffer, minWindow), MaxWindow)
	if c.ResumeTimeout <= 0 {
		c.ResumeTimeout = DefaultResumeTimeout
	}
	c.ResumeTimeout = min(max(c.ResumeTimeout.Round(time.Millisecond), time.Millisecond), MaxResumeTimeout)
	return c
}

// streamName names connection number id of a Writer or Reader (numbered
// from 0 in the order they were given) in errors.
func streamName(id int, c net.Conn) string {
	if a := c.RemoteAddr(); a != nil && a.String() != "" && a.Network() != "pipe" {
		return fmt.Sprintf("stream %d (%s)", id, a)
	}
	return fmt.Sprintf("stream %d", id)
}
