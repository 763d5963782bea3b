package link

import (
	"net"
	"sync"
)

// A two-way link gives each connection to both its Writer (the sending
// half) and its Reader (the receiving half). Each owns and closes what it
// was given; the connection itself is closed once both halves are.
//
// Closing the sending half sends nothing: the end block already told the
// peer, and a TLS close_notify or anything else after it would sit unread
// in the peer's socket (its Reader stops at the end block), and a socket
// closed with unread bytes resets the connection, destroying what it still
// had to send.
type duplex struct {
	c        net.Conn
	sendHalf *half // as given to the Writer: how to retire it
	mu       sync.Mutex
	sendDone bool
	recvDone bool
}

// half is one direction of a duplex, as a net.Conn.
type half struct {
	net.Conn
	d    *duplex
	send bool
}

func newDuplex(c net.Conn) (send, recv *half) {
	d := &duplex{c: c}
	d.sendHalf = &half{Conn: c, d: d, send: true}
	return d.sendHalf, &half{Conn: c, d: d}
}

// Close ends this half; the last half to end closes the connection.
func (h *half) Close() error {
	d := h.d
	d.mu.Lock()
	if h.send {
		d.sendDone = true
	} else {
		d.recvDone = true
	}
	both := d.sendDone && d.recvDone
	d.mu.Unlock()
	if both {
		return d.c.Close()
	}
	return nil
}
