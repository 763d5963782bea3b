package link

import (
	"fmt"
	"io"
	"sync"
)

// readData reads the payload of the data block h on s, once the reorder
// buffer has room for it, decodes it if it is compressed, and inserts it.
// It reports false if s is done: the Reader failed or closed, or s broke.
func (r *Reader) readData(s *rstream, h Header) bool {
	c, block := codecOf(h.Flags), h
	if c != codecNone {
		var prefix [lenPrefix]byte
		if _, err := io.ReadFull(s.c, prefix[:]); err != nil {
			r.lost(s, err)
			return false
		}
		var err error
		if block, err = decodedSize(h, prefix[:]); err != nil {
			r.fail(fmt.Errorf("%w (on %s)", err, s.name))
			return false
		}
	}
	ok, dup := r.admit(s, block)
	if !ok {
		return false
	}
	if dup {
		// resumable: a block sent again that came before; its bytes go
		left := int64(h.Length)
		if c != codecNone {
			left -= lenPrefix
		}
		if _, err := io.CopyN(io.Discard, s.c, left); err != nil {
			r.lost(s, err)
			return false
		}
		return true
	}
	p := payloadBuf(int(block.Length))
	var err, bad error
	if c == codecNone {
		_, err = io.ReadFull(s.c, p)
	} else {
		bp := wirePool.Get().(*[]byte)
		src := (*bp)[:h.Length-lenPrefix]
		if _, err = io.ReadFull(s.c, src); err == nil {
			bad = decompress(c, p[:len(p):len(p)], src) // no room beyond: the codec must not write more
		}
		wirePool.Put(bp)
	}
	switch {
	case err != nil:
		r.release(s, block)
		r.lost(s, err)
		return false
	case bad != nil:
		r.release(s, block)
		r.fail(fmt.Errorf("%w: %s: %s: %v", ErrBlock, s.name, h, bad))
		return false
	}
	return r.insert(s, block, p, c, h.Length)
}

// payloadPool holds the buffers of blocks a Reader has read out, for the
// next blocks: a block's buffer is 256 KiB by default, and allocating
// (and clearing) one per block costs a one-stream link a tenth of its
// throughput on loopback.
var payloadPool sync.Pool // *[]byte

func payloadBuf(n int) []byte {
	if bp, _ := payloadPool.Get().(*[]byte); bp != nil && cap(*bp) >= n {
		return (*bp)[:n]
	}
	return make([]byte, n, max(n, defaultBlockSize))
}

// recycle gives a block's buffer, read out, back to the pool.
func recycle(p []byte) {
	if cap(p) >= defaultBlockSize {
		payloadPool.Put(&p)
	}
}
