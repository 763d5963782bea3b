package socks

import (
	"io"
	"net"
)

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
