package link

// WriterStats describes a Writer.
type WriterStats struct {
	Queued  int          // blocks queued that no connection has taken yet
	Written int64        // payload bytes sent
	Streams []StreamStat // the connections, in the order they were added
}

// StreamStat describes one connection of a Writer.
type StreamStat struct {
	Name   string
	Blocks int64 // data blocks sent
	Bytes  int64 // payload bytes sent
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := WriterStats{Queued: len(w.queue), Written: w.wrote.Load()}
	for _, s := range w.streams {
		st.Streams = append(st.Streams, StreamStat{Name: s.name, Blocks: s.blocks.Load(), Bytes: s.bytes.Load()})
	}
	return st
}

// ReaderStats describes a Reader.
type ReaderStats struct {
	Streams     int    // connections still being read
	Received    int64  // payload bytes received
	Delivered   int64  // bytes returned by Read
	Buffered    int    // bytes held now, as counted against Bound
	MaxBuffered int    // the most ever held
	Bound       int    // Config.ReorderBuffer in effect
	Lost        string // a connection that ended early after the data was complete
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReaderStats{Streams: len(r.streams), Received: r.received, Delivered: int64(r.readOff),
		Buffered: r.buffered, MaxBuffered: r.maxBuf, Bound: r.cfg.ReorderBuffer, Lost: r.lostStream}
}
