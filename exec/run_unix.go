//go:build unix

package exec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sync"
	"syscall"
)

// running is a started command and its ends in this process.
type running struct {
	cmd    *osexec.Cmd
	pty    *os.File // the pty's master; nil without a pty
	stdin  *os.File // where stdin frames go: a pipe's write end, or the master
	stdout *os.File // a pipe's read end, or the master
	stderr *os.File // a pipe's read end; nil with a pty

	mu     sync.Mutex
	exited bool // waited for: its process group may be gone, or reused

	// readerDone is closed once the caller's frames end (run).
	readerDone chan struct{}
}

// callerDone is closed once the caller's side of the connection has
// ended: after the exit status, the caller closes; the service waits for
// that before it closes, so that stdin still in flight does not reset the
// connection and lose the exit status with it.
func (r *running) callerDone() <-chan struct{} { return r.readerDone }

// start starts the command as a: its login shell with -c and the
// command line (or a login shell), in its home or req.Dir, with the
// environment of environment. switchUser sets the account's uid, gid and
// groups (the service runs as root).
func start(a *account, req *Request, switchUser bool) (*running, error) {
	shell := a.shell
	args := []string{"-" + filepath.Base(shell)}
	if len(req.Command) > 0 {
		args = []string{filepath.Base(shell), "-c", req.shellLine()}
	}
	dir := req.Dir
	if dir == "" {
		dir = a.home
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			dir = "/"
		}
	}
	cmd := &osexec.Cmd{Path: shell, Args: args, Env: environment(a, req), Dir: dir, SysProcAttr: &syscall.SysProcAttr{}}
	if switchUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
	}
	r := &running{cmd: cmd}
	var theirs []*os.File // the child's ends, closed here once it started
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	if req.Pty {
		m, s, err := openPty()
		if err != nil {
			return nil, fmt.Errorf("a pty: %w", err)
		}
		theirs = append(theirs, s)
		if switchUser {
			_ = s.Chown(int(a.uid), -1)
			_ = s.Chmod(0o620)
		}
		if req.Rows != 0 && req.Cols != 0 {
			_ = setWinsize(m, req.Rows, req.Cols)
		}
		r.pty, r.stdin, r.stdout = m, m, m
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	} else {
		var ends [6]*os.File // stdin, stdout, stderr: read end, write end
		for i := 0; i < 6; i += 2 {
			rd, wr, err := os.Pipe()
			if err != nil {
				for _, f := range ends[:i] {
					f.Close()
				}
				return nil, err
			}
			ends[i], ends[i+1] = rd, wr
		}
		r.stdin, r.stdout, r.stderr = ends[1], ends[2], ends[4]
		for _, p := range []*os.File{ends[1], ends[2]} {
			growPipe(p) // fewer wake-ups of the command and of this process on bulk data
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ends[0], ends[3], ends[5]
		theirs = append(theirs, ends[0], ends[3], ends[5])
		cmd.SysProcAttr.Setpgid = true
	}
	if err := cmd.Start(); err != nil {
		r.closeOurs()
		return nil, err
	}
	return r, nil
}

func (r *running) closeOurs() {
	for _, f := range []*os.File{r.stdin, r.stdout, r.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// signal sends sig to the command's process group (a terminal's Ctrl-C
// reaches every process of the foreground job, so does this).
func (r *running) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exited {
		_ = syscall.Kill(-r.cmd.Process.Pid, sig)
	}
}

// hangup is the caller gone: SIGHUP, as a closed terminal sends it.
func (r *running) hangup() { r.signal(syscall.SIGHUP) }

// run carries the command's streams (frames from c, to w; stdin from
// sl's link when sl is not nil) until it exits and its output ends, and
// returns its status, and why the caller's side ended early (its
// connection gone, a protocol fault), if it did.
func (r *running) run(c io.Reader, w *frameWriter, sl *stdinLink) (Status, error) {
	q := newStdinQueue()
	var causeMu sync.Mutex
	var cause error
	fail := func(err error) {
		causeMu.Lock()
		if cause == nil {
			cause = err
		}
		causeMu.Unlock()
		r.hangup()
		q.close()
	}
	// the caller's frames
	r.readerDone = make(chan struct{})
	go func() {
		defer close(r.readerDone)
		for {
			f, err := readFrame(c, FromClient, stdinBuf)
			if err != nil {
				r.mu.Lock()
				exited := r.exited
				r.mu.Unlock()
				if !exited {
					var pe *ProtocolError
					if errors.As(err, &pe) {
						fail(err)
					} else {
						fail(errClientGone)
					}
				}
				return
			}
			if sl != nil && (f.Type == FrameStdin || f.Type == FrameStdinEOF) {
				fail(&ProtocolError{Type: f.Type, Msg: "stdin on the command's connection: it goes on a link of its own"})
				return
			}
			switch f.Type {
			case FrameStdin:
				if err := q.push(f.Data); err != nil {
					fail(err)
					return
				}
			case FrameStdinEOF:
				q.end()
			case FrameSignal:
				r.signal(syscall.Signal(f.Data[0]))
			case FrameWindow:
				if r.pty != nil {
					_ = setWinsize(r.pty, binary.BigEndian.Uint16(f.Data), binary.BigEndian.Uint16(f.Data[2:]))
				}
			default:
				fail(&ProtocolError{Type: f.Type, Msg: "after the request"})
				return
			}
		}
	}()
	// stdin: to the command, credit back for what it took; or from its
	// own link
	stdinDone := make(chan struct{})
	if sl != nil {
		go func() {
			defer close(stdinDone)
			if err := r.linkStdin(sl); err != nil {
				r.mu.Lock()
				exited := r.exited
				r.mu.Unlock()
				if !exited {
					fail(err)
				}
			}
		}()
	}
	go func() {
		if sl != nil {
			return
		}
		defer close(stdinDone)
		broken := false
		owed := 0 // taken, not yet granted back
		for {
			if owed > 0 && (owed >= creditBatch || q.empty()) {
				_ = w.send(FrameCredit, binary.BigEndian.AppendUint32(nil, uint32(owed)))
				owed = 0
			}
			b, eof, ok := q.pop()
			if !ok {
				return
			}
			if eof {
				if r.pty != nil {
					_, _ = r.pty.Write([]byte{4}) // VEOF
				} else {
					r.stdin.Close()
				}
				return
			}
			if !broken {
				if _, err := r.stdin.Write(b); err != nil {
					broken = true // the command closed its stdin: the rest is dropped, as a pipe would
				}
			}
			q.taken(len(b))
			owed += len(b)
			putStdinBuf(b)
		}
	}()
	// stdout and stderr, until they end
	var outs sync.WaitGroup
	copyOut := func(f *os.File, typ byte) {
		defer outs.Done()
		buf := make([]byte, frameHeader+MaxData) // the header's room, then the output
		for {
			n, err := f.Read(buf[frameHeader:])
			if n > 0 {
				if w.sendBuilt(typ, buf[:frameHeader+n]) != nil {
					fail(errClientGone)
				}
			}
			if err != nil {
				return
			}
		}
	}
	outs.Add(1)
	go copyOut(r.stdout, FrameStdout)
	if r.stderr != nil {
		outs.Add(1)
		go copyOut(r.stderr, FrameStderr)
	}
	outs.Wait()
	err := r.cmd.Wait()
	r.mu.Lock()
	r.exited = true
	r.mu.Unlock()
	q.close()
	if sl != nil {
		sl.stop() // ends a read of its link that waits
	}
	if r.pty == nil {
		r.stdin.Close()
	}
	<-stdinDone
	r.stdout.Close()
	if r.stderr != nil {
		r.stderr.Close()
	}
	var st Status
	var ee *osexec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
		} else {
			st.Code = ws.ExitStatus()
		}
	default:
		return Status{Code: 255}, fmt.Errorf("waiting for the command: %w", err)
	}
	causeMu.Lock()
	defer causeMu.Unlock()
	return st, cause
}

// linkStdin writes the bytes of sl's link, once claimed, into the
// command's stdin until the link ends (stdin's end: the command reads
// it) or the command is done (sl stopped), then lets the link go. A
// command that closed its stdin ends the link: the rest of stdin has
// nowhere to go, as with a pipe. A link cut before stdin's end is an
// error (the command would wait for the rest for ever): the caller hangs
// the command up.
func (r *running) linkStdin(sl *stdinLink) error {
	defer close(sl.done)
	br := sl.wait()
	if br == nil {
		return nil
	}
	// the link's bytes in large writes (gather): while one goes into the
	// pipe, the next reads gather
	err := gather(r.stdin, br)
	var we writerError
	switch {
	case errors.As(err, &we):
		return nil // the command closed its stdin
	case err != nil:
		return fmt.Errorf("its stdin's link ended before stdin's end: %w", err)
	}
	if r.pty != nil {
		_, _ = r.pty.Write([]byte{4}) // VEOF
	} else {
		r.stdin.Close()
	}
	return nil
}
