package wire

import (
	"math/bits"
	"sync"
)

// Frame payloads are read into pooled buffers, in size classes of powers
// of two from 128 bytes to MaxPayload, borrowed by a Reader for one frame
// (Reader.Read). A Reader used to keep a buffer the size of the largest
// frame it had read: a trunk that once relayed data kept 64 KiB or more
// after it went idle, and a hub has thousands of idle trunks (issue 23).

// smallPayload is what a Reader reads into itself: pings, pongs, windows,
// fins, and sealed ones (a sealed ping's payload is 36 bytes).
const smallPayload = 64

const (
	minBodyShift = 7  // the smallest class: 128 bytes
	maxBodyShift = 20 // the largest: MaxPayload
)

var bodyPools [maxBodyShift - minBodyShift + 1]sync.Pool

// bodyClass is the class of a payload of n bytes (smallPayload < n ≤
// MaxPayload).
func bodyClass(n int) int {
	return max(bits.Len(uint(n-1)), minBodyShift) - minBodyShift
}

// getBody borrows a buffer of at least n bytes.
func getBody(n int) *[]byte {
	c := bodyClass(n)
	if b, ok := bodyPools[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 1<<(c+minBodyShift))
	return &b
}

// putBody returns a buffer from getBody.
func putBody(b *[]byte) {
	bodyPools[bodyClass(cap(*b))].Put(b)
}

// Keep takes the pooled buffer that holds the frame's payload from its
// Reader, so that the payload outlives the next Read without a copy (a
// hub forwards a data frame's payload as it was read); the caller returns
// it with PutBody once done. Nil when the payload is not in a pooled
// buffer (a small one, an opened sealed one, a frame not from a Reader,
// or one whose buffer was already kept). Only the goroutine that calls
// the Reader's Read may call it, before its next Read.
func (f Frame) Keep() *[]byte {
	r := f.from
	if r == nil || r.body == nil || len(f.Payload) == 0 || &(*r.body)[0] != &f.Payload[0] {
		return nil
	}
	b := r.body
	r.body = nil
	return b
}

// PutBody returns a buffer taken with Frame.Keep to its pool.
func PutBody(b *[]byte) { putBody(b) }
