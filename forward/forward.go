// Package forward joins unmodified programs to overlay services through
// the node agent: Forward makes a local TCP port lead to a virtual
// address, NC joins a pair of byte streams (stdin and stdout, for ssh's
// ProxyCommand) to one, and Expose publishes a local TCP service on the
// overlay. Connection setup, link options and the listening side are the
// agent's (agent stream requests), and so is the copying wherever the
// agent can take the local ends over (sockets and pipes: control.Stream);
// this package owns the local ends and their half-close (a program's EOF
// reaches the far side as EOF, so ssh, scp and nc-style protocols finish
// cleanly).
//
// Who is served: Forward's connections are made with the agent's
// credentials, so a forwarded port serves only its user. A client on this
// host is served when the kernel says its socket is this process's uid's
// or root's (package peercred); any other account is told
//
//	gridlink forward: forward of uid N refuses uid M
//
// and its connection closed, and the log says the same. A client on
// another host (a port listening beyond loopback) cannot be identified:
// it is refused too unless Options.AllowRemote (gridlink forward
// --allow-remote) says to serve whoever reaches the port.
package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/peercred"
)

// Options are Forward's.
type Options struct {
	// Logf, if set, logs the connections that fail or are refused.
	Logf func(format string, args ...any)
	// AllowRemote serves clients of other hosts, whom the kernel cannot
	// name (a listener beyond loopback): anyone who reaches the port
	// acts with the agent's credentials. Off: they are refused. Another
	// account of this host is refused either way.
	AllowRemote bool
}

// Forward accepts TCP connections on l until it fails or ctx ends, and
// joins each it admits (see the package doc) to a new overlay connection
// made by the agent as req says. A connection refused or that cannot be
// set up is closed and reported to o.Logf; the others go on; so do they
// when one fails mid-stream (why, the agent tells: a hub on the way died,
// say), also reported to o.Logf.
func Forward(ctx context.Context, l net.Listener, c *control.Client, req control.ConnectRequest, o Options) error {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		local, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go func() {
			if err := admit(local, o.AllowRemote); err != nil {
				logf("forward %s -> %s: %v", local.RemoteAddr(), req.Addr, err)
				_, _ = io.WriteString(local, "gridlink forward: "+err.Error()+"\n")
				local.Close()
				return
			}
			dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			s, err := c.Open(dctx, req)
			cancel()
			if err != nil {
				logf("forward %s -> %s: %v", local.RemoteAddr(), req.Addr, err)
				local.Close()
				return
			}
			// the agent takes the connection over and copies it itself;
			// this goroutine waits for the end (the process's exit cuts it).
			if err := s.Join(local); err != nil {
				logf("forward %s -> %s: %v", local.RemoteAddr(), req.Addr, err)
			}
		}()
	}
}

// admit says why c's client is refused, or nil: the kernel names its
// socket's uid, or (allowRemote) places it on no socket of this host.
func admit(c net.Conn, allowRemote bool) error {
	err := peercred.Admit("forward", c)
	if allowRemote && errors.Is(err, peercred.ErrNotLocal) && !isLoopback(c.RemoteAddr()) {
		return nil
	}
	return err
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// ncBuffer is the copy buffer of each direction of NC.
const ncBuffer = 256 << 10

// NC joins in and out to a new overlay connection: what in says is sent,
// and at its EOF the connection's sending half is closed; what the far
// side sends is written to out until it closes. NC returns when the far
// side has closed (or failed), as nc does, or when ctx ends (nil).
//
// When in and out are files the agent can take over (pipes or sockets,
// as ssh's ProxyCommand and shell pipelines give them; regular files;
// /dev/null), the agent copies without this process; otherwise (a
// terminal) NC copies.
func NC(ctx context.Context, c *control.Client, req control.ConnectRequest, in io.Reader, out io.Writer) error {
	s, err := c.Open(ctx, req)
	if err != nil {
		return err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	growPipe(in)
	err = ncJoin(s, in, out)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func ncJoin(s *control.Stream, in io.Reader, out io.Writer) error {
	inf, ok := in.(*os.File)
	outf, ok2 := out.(*os.File)
	if ok && ok2 {
		err := s.Hand(inf, outf)
		if err == nil {
			return s.Wait()
		}
		if !errors.Is(err, control.ErrNoHandoff) {
			return err
		}
	}
	conn, err := s.Conn()
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, ncBuffer)
		// both sides wrapped: an *os.File's WriteTo would copy in 32 KiB
		// reads, 8 times the system calls and wake-ups of ncBuffer.
		if _, err := io.CopyBuffer(struct{ io.Writer }{conn}, struct{ io.Reader }{in}, buf); err == nil {
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
	}()
	buf := make([]byte, ncBuffer)
	_, err = io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{conn}, buf)
	// the far side is done: whatever in still says has nowhere to go (a
	// reader of stdin stays blocked; the process exits without it). The
	// bytes ended here, cleanly or not; the agent knows why (a hub on
	// the way died, the peer was revoked): a failure it names is the
	// error, else a local one (writing out failed).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if why := s.End(ctx); why != nil {
		return why
	}
	return err
}

// Expose publishes the local TCP service local on virtual port port of
// the agent's node and calls bound with its virtual address; it returns
// when ctx ends (nil) or the agent stops (an error).
func Expose(ctx context.Context, c *control.Client, req control.ExposeRequest, bound func(addr string)) error {
	l, err := c.Expose(ctx, req)
	if err != nil {
		return err
	}
	bound(l.Addr)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	err = l.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
