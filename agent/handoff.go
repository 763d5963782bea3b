package agent

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// The agent's side of the handoff (control.Stream.Hand): it takes the
// client's local end as descriptors and copies between it and the link.

// handoffWait bounds the agent's wait for the client's choice.
const handoffWait = 30 * time.Second

// handoff serves a connect request whose client offered its local end:
// c is the upgraded control connection, up the link.
func (a *Agent) handoff(c, up net.Conn, id uint64, end *streamEnd, addr string) {
	defer c.Close()
	mode := byte(0)
	defer func() {
		if mode != control.ModeStream {
			a.ends.done(id)
		}
	}()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		up.Close()
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: "handoff: the client sent bytes before the answer", Kind: control.KindBadRequest}))
		return
	}
	_ = uc.SetReadDeadline(time.Now().Add(handoffWait))
	var local localEnd
	var err error
	mode, local, err = receiveEnds(uc)
	_ = uc.SetReadDeadline(time.Time{})
	if err != nil {
		up.Close()
		a.logf("agent: handoff: %v", err)
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: "handoff: " + err.Error(), Kind: control.KindBadRequest}))
		return
	}
	if mode == control.ModeStream {
		a.joinStream(c, up, id, end, addr)
		return
	}
	// the client's going away (or sending anything) cuts the stream.
	go func() {
		var one [1]byte
		_, _ = uc.Read(one[:])
		local.Close()
		up.Close()
	}()
	ev := control.Event{Done: true}
	if err := local.join(up); err != nil {
		ev = control.Event{Error: err.Error(), Kind: control.KindFailed}
	}
	_, _ = c.Write(control.AppendEvent(nil, ev))
}

// localEnd is a local end handed to the agent.
type localEnd interface {
	join(up net.Conn) error
	Close() error
}

// socketEnd is one stream socket, joined as Join does.
type socketEnd struct{ net.Conn }

func (e socketEnd) join(up net.Conn) error {
	if _, _, err := control.JoinErr(e.Conn, up); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	return nil
}

// pairBufs are pairEnds' copy buffers, as large as Join's.
var pairBufs = sync.Pool{New: func() any { return new([control.JoinBuffer]byte) }}

// pairEnds are a read end and a write end, joined as nc joins stdin and
// stdout: in's EOF half-closes up, and the stream ends with up's bytes.
type pairEnds struct{ in, out *os.File }

func (p pairEnds) join(up net.Conn) error {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		buf := pairBufs.Get().(*[control.JoinBuffer]byte)
		defer pairBufs.Put(buf)
		_, err := io.CopyBuffer(struct{ io.Writer }{up}, struct{ io.Reader }{p.in}, buf[:])
		if cw, ok := up.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		}
	}()
	buf := pairBufs.Get().(*[control.JoinBuffer]byte)
	_, err := io.CopyBuffer(struct{ io.Writer }{p.out}, struct{ io.Reader }{up}, buf[:])
	pairBufs.Put(buf)
	// the far side is done: what in still says has nowhere to go. Closing
	// up also ends a write to it that the far side no longer reads.
	p.Close()
	up.Close()
	<-sent
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	return nil
}

func (p pairEnds) Close() error {
	p.in.Close()
	p.out.Close()
	return nil
}
