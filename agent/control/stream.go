package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Stream requests turn a control connection into a byte stream, so that
// programs outside the agent (gridlink nc, forward, socks) use the agent's
// node instead of starting their own:
//
//	POST /connect  ConnectRequest  → 101 naming the stream (Gridlink-Stream:
//	                                 ID), then the overlay link's bytes;
//	                                 GET /stream/ID/end then says why they
//	                                 ended (streamend.go)
//	POST /bind     BindRequest     → 101, {"bound":ADDR}, when the peer comes
//	                                 {"peer":ADDR}, then its bytes
//	POST /expose   ExposeRequest   → 101, {"bound":ADDR}; every link accepted
//	                                 there is joined to a new TCP connection to
//	                                 Local, until the client closes
//
// A request carries "Connection: Upgrade" and "Upgrade: " + StreamProto; a
// failure before the upgrade is an HTTP error whose body is a JSON
// StreamError. After the upgrade the agent sends event lines (event.go),
// then raw bytes; a connect may instead hand the agent its local end as
// file descriptors, for the agent to copy itself (handoff.go). A bind
// whose client sends anything, or closes, before {"peer"} is cancelled;
// so is an expose whose client closes.
const StreamProto = "gridlink-stream"

// WithBuffered is c, whose first bytes br already read from it (an HTTP
// request or answer's reader), as one connection: c itself when br holds
// nothing more (so that copies can splice, and descriptors be passed).
func WithBuffered(c net.Conn, br *bufio.Reader) net.Conn {
	if br.Buffered() > 0 {
		return &prefixConn{Conn: c, r: io.MultiReader(br, c)}
	}
	return c
}

// prefixConn is a connection whose first bytes were already buffered.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *prefixConn) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// stream sends a stream request to the agent on its own control
// connection and returns the upgraded connection and the answer's header.
// The connection is the unix socket itself (so copies to and from TCP can
// splice, and descriptors can be passed) unless the agent's first bytes
// arrived with the answer.
func (c *Client) stream(ctx context.Context, path string, body any) (net.Conn, http.Header, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://agent"+path, bytes.NewReader(b))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", StreamProto)
	req.Header.Set("Content-Type", "application/json")
	br := bufio.NewReaderSize(conn, 4096)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || err != nil {
		conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, fmt.Errorf("agent: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, nil, ResponseError(resp)
	}
	return WithBuffered(conn, br), resp.Header, nil
}

// Connect asks the agent for a link to a virtual address (or, with Exit,
// to a TCP address through an exit node) and returns its byte stream.
// Errors are *StreamError, whose Kind says why.
func (c *Client) Connect(ctx context.Context, req ConnectRequest) (net.Conn, error) {
	req.Handoff = false
	conn, _, err := c.stream(ctx, "/connect", req)
	return conn, err
}

// Listening is an overlay listener the agent holds for a client: a bind
// (one peer) or an exposed service. Closing it ends the listener.
type Listening struct {
	conn net.Conn
	// Addr is the listener's virtual address, NAME:PORT.
	Addr string
}

func (c *Client) listen(ctx context.Context, path string, req any) (*Listening, error) {
	conn, _, err := c.stream(ctx, path, req)
	if err != nil {
		return nil, err
	}
	ev, err := ReadEvent(conn)
	if err == nil && ev.Bound == "" {
		err = fmt.Errorf("agent: %s: %s", path, orElse(ev.Error, "no bound address"))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Listening{conn: conn, Addr: ev.Bound}, nil
}

func orElse(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Bind asks the agent to listen on the overlay for one peer.
func (c *Client) Bind(ctx context.Context, req BindRequest) (*Listening, error) {
	return c.listen(ctx, "/bind", req)
}

// Accept waits for a bind's peer and returns its connection and virtual
// address. It can be called once.
func (l *Listening) Accept(ctx context.Context) (net.Conn, string, error) {
	stop := context.AfterFunc(ctx, func() { l.conn.Close() })
	ev, err := ReadEvent(l.conn)
	if !stop() {
		return nil, "", ctx.Err()
	}
	if err == nil && ev.Peer == "" {
		err = &StreamError{Kind: orElse(ev.Kind, KindFailed), Msg: orElse(ev.Error, "bind: no peer")}
	}
	if err != nil {
		l.conn.Close()
		return nil, "", err
	}
	return l.conn, ev.Peer, nil
}

// Expose asks the agent to publish the local TCP service req.Local on
// the overlay, for as long as the returned Listening stays open.
func (c *Client) Expose(ctx context.Context, req ExposeRequest) (*Listening, error) {
	return c.listen(ctx, "/expose", req)
}

// Wait blocks until the agent ends an exposure (it stopped).
func (l *Listening) Wait() error {
	_, err := io.Copy(io.Discard, l.conn)
	if err == nil {
		err = errors.New("agent: the agent ended the exposure")
	}
	return err
}

// Close ends the listener.
func (l *Listening) Close() error { return l.conn.Close() }
