// Package xfer moves files between nodes: `gridlink serve` (a transfer
// service publishing a directory) and `gridlink cp` (scp-like copies to,
// from and between services). It owns the transfer protocol, its
// checksums, resuming, the served root's confinement, and third-party
// transfers (pushes) with their authorization hook. Connections are the
// caller's: a Dialer and a net.Listener, in gridlink a link (package
// link), whose parallel striped streams, compression and TLS carry the
// protocol; the command line and progress display are package cli's.
//
// # Why links and not the node agent
//
// `gridlink serve` and `gridlink cp` each run their own node, as `gridlink
// perf` does: a transfer wants a link tuned for it (Auto streams,
// compression), which the agent's local control API does not hand out,
// and a service that runs as the user who owns the data needs no agent
// running as someone else.
//
// # Sessions
//
// A client opens one connection per transfer and sends a request (get,
// put or push; see wire.go for every message); the service accepts or
// refuses it. Then one end is the sender and the other the receiver:
//
//	sender                               receiver
//	plan (files, bytes)            ->
//	file 1, file 2, ... (window)   ->    stat / hash what is there
//	                               <-    want 1 (digests of blocks it has)
//	data 1@0, data 1@1M, ..., end 1 ->   verify each block, write at offset
//	                               <-    ack 1 (verified, renamed), want 2 ...
//	bye                            ->
//	                               <-    bye
//
// Entries are offered ahead of the data, up to window of them unanswered,
// so that many small files cost no round trip each: the receiver answers
// each at once, and the sender streams the data of one file after the
// other. Blocks carry their offset and digest; over one link they still
// travel over all its streams in parallel.
//
// # Integrity and resume
//
// Every block has an XXH64 digest and every file a digest over its block
// digests (digest.go), computed on both ends while the data flows. A file
// is written as DIR/.NAME.gridlink-part and renamed to NAME only once its
// digests agree, with the sender's mode and mtime; a failed file's
// partial file is removed, a dropped connection's is kept. To resume (on
// request, and always after a dropped connection, with exponential
// backoff) the receiver hashes the partial file, or a whole file already
// there with the same size and mtime, and the sender sends only the
// blocks whose digests differ: missing ones, and ones that changed (a
// flipped byte costs one block). The receiver does not fsync: a crash of
// its host can lose what its page cache held, as with cp and scp.
//
// Placement follows scp: into DEST if it is a directory (DEST/NAME/...),
// else as DEST (the one source's copy). A tree copied as a new DEST makes
// DEST a directory, so a later run would copy into it: until the copy
// completes, DEST holds UnfinishedFile naming the source, and a resumed
// request (Options.Resume, flagResume) whose DEST holds it continues that
// copy in DEST (placeAs; DEST's directories count as made by the copy,
// so they get the source's modes at the end). A resumed copy of another
// source into it is refused (UnfinishedError), in words on both ends; a
// copy without resume keeps scp's rule, and a note says where the
// unfinished one is. Senders never offer, and receivers never write, an
// entry of that name.
//
// # The served root
//
// Every path a client names is relative to the served root and opened
// through os.Root: "..", absolute paths and symbolic links that point out
// of the root are refused with an error naming the path; a failure of one
// file is reported for that file, and the service goes on serving.
//
// # What a receiver writes
//
// A receiver trusts no sender with where things go (scp's CVE-2019-6111
// is a client that did): it writes only what its caller named, the one
// file, or the tree below the named directory, whoever sends. An entry's
// name must be a clean relative path (checkEntryPath: no "..", ".", empty
// elements or leading "/", no control characters); one that is not ends
// the session with an UnsafePathError naming it, and the receiver tells
// the sender why (mAbort). Its first element must be the base name of a
// source the caller asked for (names.go): a get's client holds the
// service to its own request (a request for the served root takes the one
// directory name the service gives it), and a put announces its sources'
// base names in its request, to which the service holds the client's
// entries, and a push's target its source's; an entry named otherwise
// ends the session with an UnaskedError naming it and the names asked
// for, on both ends, and nothing of it is written. Files are written through an
// os.Root: on the destination directory, or, when the destination is a
// new name or a file, on the directory that holds it, where the receiver
// touches that one name only (and below it, once it is a directory,
// through a root of its own), so no symbolic link, even one swapped in
// during the transfer, leads out. Modes and mtimes go only on what the
// receiver made: a file's partial file before it is renamed, directories
// it created (in this session or an earlier attempt of the transfer); a
// directory that was there before, the served root included, keeps its
// own.
//
// # Rate limits, quotas, changing sources
//
// A request carries the caller's rate limit (Options.Limit): whichever
// end sends, the caller's own sender or the service for gets and pushes,
// paces its file data to it. A service's quotas (Config.Quota,
// Config.UserQuota) bound the file data it stores (see quota.go): the
// service's counts what the served tree holds, measured at start; each
// user's what the user's puts added, kept across restarts in the root's
// StateFile, which no client may read or write. A put that would exceed
// one is refused with a QuotaError before its data flows, or at the file
// that exceeds it. Whatever the quotas, a receiver refuses what does not
// fit on its file system, and stops when a write finds it full, with a
// SpaceError (see space.go). A sender checks each file's size
// and mtime again once it has read all of it: a file that changed while
// it was sent could be torn, so it is failed as changed on both ends
// (mFail's failChanged), nothing of it is stored, and the transfer
// returns a ChangedError naming it.
//
// # Pausing
//
// A transfer with a Hold (Options.Hold) pauses and resumes while it runs:
// the sender of the file data finishes the block it is sending, flushes,
// and holds the next one until resumed (hold.go); the link stays open and
// idle, and the bytes that follow are the ones that would have, so what
// is stored is the same. A put's sender is this end; a push's is the
// source service, which the caller tells with mHold and mGo (empty
// frames, the only ones a push's caller may send once it runs). A get's
// sender is the service, which no message reaches: a get refuses a Hold
// (ErrHoldGet). The time held does not count for the rate limit.
//
// # Third-party transfers
//
// A push asks service A to send its paths to service B: A dials B itself
// (Config.Push) and runs a put there, so the data flows from A to B
// directly, while the caller watches A's progress events and gets its
// summary. Before A dials, the authorization step runs (Delegation): A may
// send the caller a request, the caller answers it (Options.Delegate), and
// A turns the answer into the credential it dials B with. In a grid with a
// CA that is an RFC 3820 proxy delegated by signing request
// (ProxyDelegation, DelegateProxy): A makes a key, the caller signs a
// short-lived proxy for it restricted to the transfer service at B alone
// (gridlink cp restricts it to port-2811@ID, ID B's identity key), and no
// private key travels. B sees the caller (the proxy's user) dialling, and
// admits or refuses as it would the caller itself.
package xfer
