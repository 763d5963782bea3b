// Package vconn sets up virtual connections: a process asks for a
// connection to another process of the job, by name and port, and gets a
// net.Conn set up the most direct way the network allows (direct, reverse,
// splice, routed). It owns the method race, the per-site method cache, the
// spare connections, the splice rendezvous, the listener registry, the
// accept-side commit protocol, why a method failed (typed facts, MethodError,
// and the words Explain builds from them), and keeping and advertising the node's port
// mapping (Config.PortMap); finding addresses and dialling them is
// package direct's, relaying and name lookup the hubs' (package hub), NAT
// classification and the simultaneous open package nat's, talking to the
// NAT gateway package portmap's.
package vconn

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// Method is a connection setup method.
type Method string

// Setup methods, most direct first.
const (
	Direct  Method = "direct"  // the dialler reaches the target's listener
	Reverse Method = "reverse" // the target dials the dialler back, asked through the hubs
	Splice  Method = "splice"  // TCP simultaneous open through NATs and firewalls, arranged through the hubs
	Routed  Method = "routed"  // data relayed hub to hub
)

// Addr is a virtual address as a net.Addr.
type Addr struct {
	Node identity.Machine
	Port uint16
}

// Network returns "gridlink".
func (a Addr) Network() string { return "gridlink" }

func (a Addr) String() string {
	name := a.Node.Name
	if name == "" {
		name = a.Node.ID.String()
	}
	return name + ":" + strconv.Itoa(int(a.Port))
}

// Conn is a virtual connection. Its bytes are protected end to end by the
// TLS session that proved the peer's identity, whatever the method, unless
// both ends leave that session for the clear (Clear).
type Conn struct {
	net.Conn
	method Method
	local  Addr
	remote Addr
	setup  time.Duration
	spare  bool
	clear  bool     // left TLS: Conn is the connection beneath
	peer   pki.Peer // what the handshake proved (revocation.go)
	onDone func()
	done   sync.Once
	bytes  *pathCounter // the node's count of this method's bytes (counters.go); nil: not counted
	own    connCounter  // this connection's bytes (ConnInfo), counted as bytes is
	// cut is why the node closed the connection (revocation.go): its
	// reads and writes fail with it instead of net.ErrClosed.
	cut atomic.Pointer[CutError]
}

// CutError says the node closed a connection because its peer is no
// longer admitted (a new revocation list revoked it); Err is why.
type CutError struct {
	Peer identity.Machine
	Err  error
}

func (e *CutError) Error() string {
	return fmt.Sprintf("vconn: connection cut: %s is no longer admitted: %v", e.Peer, e.Err)
}

func (e *CutError) Unwrap() error { return e.Err }

// cutFor closes the connection, giving why to its reads and writes.
func (c *Conn) cutFor(why error) {
	c.cut.CompareAndSwap(nil, &CutError{Peer: c.remote.Node, Err: why})
	c.Close()
}

// Read reads into p; on a connection the node cut, the error says why
// (CutError).
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.bytes != nil {
		c.bytes.received.Add(uint64(n))
		c.own.received.Add(uint64(n))
	}
	if err != nil {
		if ce := c.cut.Load(); ce != nil {
			err = ce
		}
	}
	return n, err
}

// Method is how the connection was set up.
func (c *Conn) Method() Method { return c.method }

// Setup is how long the dial took (zero on the accepting side).
func (c *Conn) Setup() time.Duration { return c.setup }

// Spare says whether the dial used a spare direct connection opened in the
// background after an earlier one (see Config.SpareTTL).
func (c *Conn) Spare() bool { return c.spare }

// Peer is the machine at the other end.
func (c *Conn) Peer() identity.Machine { return c.remote.Node }

// Proof is what the other end's handshake proved: its identity key and,
// in a grid with a CA, what its certificate chain says (subject, role,
// groups); the zero Peer for a connection without a TLS session.
func (c *Conn) Proof() pki.Peer { return c.peer }

// LocalAddr returns this end's virtual address.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the other end's virtual address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// Clear leaves the TLS session: from now on the connection's bytes travel
// as they are, authenticated by the handshake only (JPARSS's
// "authenticated plain", for speed where confidentiality and integrity are
// not needed). Both ends must call it at the same point of the byte
// stream: the protocol on top agrees on that point over TLS first, and no
// TLS record may be in flight either way (each end has read, whole, every
// record the other sent before it switched). Package link does this.
func (c *Conn) Clear() error {
	if c.clear {
		return errors.New("vconn: connection is already in the clear")
	}
	pc := c.session()
	if pc == nil {
		return fmt.Errorf("vconn: %s connection is not a TLS session (%T)", c.method, c.Conn)
	}
	if err := pc.Verdict(); err != nil {
		return err
	}
	raw, err := pki.Beneath(pc.Conn)
	if err != nil {
		return fmt.Errorf("vconn: cannot leave TLS: %w", err)
	}
	c.Conn, c.clear = raw, true
	return nil
}

// Write writes p; over TLS, its records go out in as few writes as fit in
// 256 KiB (pki.WriteRecords).
func (c *Conn) Write(p []byte) (int, error) {
	var n int
	var err error
	if pc := c.session(); pc != nil {
		n, err = pc.WriteRecords(p)
	} else {
		n, err = c.Conn.Write(p)
	}
	if n > 0 && c.bytes != nil {
		c.bytes.sent.Add(uint64(n))
		c.own.sent.Add(uint64(n))
	}
	if err != nil {
		if ce := c.cut.Load(); ce != nil {
			err = ce
		}
	}
	return n, err
}

// WriteBuffers writes the buffers one after another as one batch: over
// TLS their records go out in as few writes as fit in 256 KiB
// (pki.WriteBuffers), in the clear in one writev (net.Buffers).
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	var n int64
	var err error
	if pc := c.session(); pc != nil {
		n, err = pc.WriteBuffers(bufs)
	} else {
		nb := net.Buffers(bufs)
		n, err = nb.WriteTo(c.Conn)
	}
	if n > 0 && c.bytes != nil {
		c.bytes.sent.Add(uint64(n))
	}
	if err != nil {
		if ce := c.cut.Load(); ce != nil {
			err = ce
		}
	}
	return n, err
}

// KeepTLS says the connection stays in its TLS session (Clear will not be
// called): its reads may then run ahead of the records, a read per record
// fewer.
func (c *Conn) KeepTLS() {
	if pc := c.session(); pc != nil {
		pki.ReadAhead(pc.Conn)
	}
}

// session is the connection's TLS session: nil once it left it (Clear).
func (c *Conn) session() *pki.Conn {
	switch t := c.Conn.(type) {
	case *pki.Conn:
		return t
	case *direct.Conn:
		return t.Conn
	}
	return nil
}

// Encrypted says whether the connection's bytes are still protected by its
// TLS session (see Clear).
func (c *Conn) Encrypted() bool { return !c.clear }

// CloseWrite half-closes the connection: the peer reads EOF, this end
// can still read.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("vconn: %s connection cannot half-close", c.method)
}

// Close closes the connection. It is safe to call from several goroutines.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.done.Do(func() {
		if c.onDone != nil {
			c.onDone()
		}
	})
	return err
}

func (c *Conn) String() string {
	return fmt.Sprintf("%s -> %s (%s)", c.local, c.remote, c.method)
}
