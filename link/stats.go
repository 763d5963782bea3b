package link

import "time"

// WriterStats describes a Writer.
type WriterStats struct {
	Queued  int   // blocks queued that no connection has taken yet
	Written int64 // stream bytes sent (data block payloads before compression)
	// Wire is the data block payload bytes sent, as on the wire: Written
	// less what compression saved (headers are not counted).
	Wire   int64
	Blocks CodecBlocks // data blocks sent, by codec
	// Adaptive describes CompressAuto's estimates and current choice, for
	// people; empty with other settings.
	Adaptive string
	Streams  []StreamStat // the connections, in the order they were added
	// Resumable links only: the bytes the peer acknowledged, what the
	// Writer keeps (counted as against the window) now and at most, the
	// blocks it sent again after a connection died, and how long Write
	// waited for room in the window (the window, not the path, held the
	// link back that long).
	Acked      int64
	Kept       int
	MaxKept    int
	Resent     int64
	WindowWait time.Duration
	// Window is the window in use now (it grows up to the one agreed
	// while it holds the link back).
	Window int
}

// CodecBlocks counts data blocks by how their payload went.
type CodecBlocks struct {
	None int64 // as it was
	S2   int64 // compressed with S2
	Zstd int64 // compressed with zstd
}

func (b *CodecBlocks) add(c codec) {
	switch c {
	case codecS2:
		b.S2++
	case codecZstd:
		b.Zstd++
	default:
		b.None++
	}
}

// StreamStat describes one connection of a Writer.
type StreamStat struct {
	Name   string
	Blocks int64 // data blocks sent
	Bytes  int64 // stream bytes sent
	Wire   int64 // payload bytes sent, as on the wire
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := WriterStats{Queued: len(w.queue), Written: w.wrote.Load(), Wire: w.wire.Load(),
		Blocks: CodecBlocks{None: w.codecs[codecNone].Load(), S2: w.codecs[codecS2].Load(), Zstd: w.codecs[codecZstd].Load()}}
	if w.auto != nil {
		st.Adaptive = w.auto.String()
	}
	st.Acked, st.Kept, st.MaxKept, st.Resent = int64(w.acked), w.keptCost, w.maxKept, w.resent
	st.WindowWait, st.Window = time.Duration(w.winWait.Load()), w.win
	for _, s := range w.streams {
		st.Streams = append(st.Streams, StreamStat{Name: s.name, Blocks: s.blocks.Load(), Bytes: s.bytes.Load(), Wire: s.wire.Load()})
	}
	return st
}

// ReaderStats describes a Reader.
type ReaderStats struct {
	Streams     int         // connections still being read
	Received    int64       // stream bytes received (decoded)
	Wire        int64       // data block payload bytes received, as on the wire
	Blocks      CodecBlocks // data blocks received, by codec
	Delivered   int64       // bytes returned by Read
	Buffered    int         // bytes held now, as counted against Bound
	MaxBuffered int         // the most ever held
	Bound       int         // the bound in effect (Config.ReorderBuffer, raised with the connections)
	Lost        string      // a connection that ended early after the data was complete
	// Resumable links only: data blocks received again and dropped, and
	// their bytes.
	Duplicates     int64
	DuplicateBytes int64
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReaderStats{Streams: len(r.streams), Received: r.received, Wire: r.wire, Blocks: r.blocks, Delivered: int64(r.readOff),
		Buffered: r.buffered, MaxBuffered: r.maxBuf, Bound: r.bound, Lost: r.lostStream, Duplicates: r.dups, DuplicateBytes: r.dupBytes}
}
