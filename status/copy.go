package status

// Copy is the summary `gridlink cp --json` prints when a copy ends (one
// JSON object on one line), and what bench/xfer.sh and the lab read.
type Copy struct {
	Files     int         `json:"files"`                // regular files stored and verified (or already there whole)
	Dirs      int         `json:"dirs"`                 // directories made or already there
	Failed    int         `json:"failed"`               // entries not stored (see Errors)
	Bytes     int64       `json:"bytes"`                // the size of the files stored
	SentBytes int64       `json:"sent_bytes"`           // file data sent over the link, every attempt counted
	KeptBytes int64       `json:"kept_bytes"`           // what the receiver already had and kept (resume)
	Attempts  int         `json:"attempts"`             // sessions it took (more after dropped connections)
	Seconds   float64     `json:"seconds"`              // wall time
	MbitPerS  float64     `json:"mbit_per_s"`           // Bytes over Seconds
	Errors    []CopyError `json:"errors,omitempty"`     // the first failures (the count is Failed)
	Method    string      `json:"method,omitempty"`     // how the copy's connection was set up: direct, reverse, splice or routed
	Streams   int         `json:"streams,omitempty"`    // the link's parallel streams
	Failure   string      `json:"failure,omitempty"`    // why the copy failed, when it did
	PushError string      `json:"push_error,omitempty"` // a third-party push: why the source's session failed
}

// CopyError is why an entry was not stored.
type CopyError struct {
	Path  string `json:"path"`
	Error string `json:"error"`
	// Changed: the source changed while it was sent, so nothing of it
	// was stored.
	Changed bool `json:"changed,omitempty"`
}
