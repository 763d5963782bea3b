package socks

import (
	"io"
	"net"
)

// Joiner is a connection from Backend.Connect that joins the client's
// connection to itself better than relay can: AgentBackend's hands the
// client's socket to the node agent, which then copies without the
// server. Join returns when both directions have ended and closes client.
type Joiner interface {
	Join(client net.Conn) error
}

// join joins the client c to up, through up's Join if it has one.
func join(c, up net.Conn) error {
	if j, ok := up.(Joiner); ok {
		return j.Join(c)
	}
	relay(c, up)
	return nil
}

// relay copies both ways until both directions end. When one side's
// sending ends (EOF), the other side's sending half is closed (CloseWrite)
// so that half-closing protocols (ssh, nc-style EOF) work; on an error both
// connections are closed.
func relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			a.Close()
			b.Close()
		}
		done <- struct{}{}
	}
	go half(a, b)
	go half(b, a)
	<-done
	<-done
}
