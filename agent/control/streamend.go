package control

import (
	"context"
	"fmt"
	"time"
)

// Why a stream ended, for clients that copy its bytes themselves.
//
// A client that carries a connect's bytes through the control connection
// (nc on a terminal; forward and socks where the agent cannot take the
// socket) sees only the byte stream end. So the agent names every connect
// stream in its 101 answer,
//
//	Gridlink-Stream: ID          (decimal)
//
// remembers the first failure of the stream's overlay side (reading or
// writing the link: a hub on the way died, the peer was revoked), and
// answers, once the client has seen the stream end,
//
//	GET /stream/ID/end → 200 Event: {"done":true} (the overlay side has
//	                     not failed) or {"error":MSG,"kind":KIND}
//
// Only the uid that made the stream may ask (403, KindCallerRefused,
// logged, for any other); an unknown or forgotten ID is 404. The agent
// remembers a stream while it lasts and for a minute after (at most 1024
// ended ones).
const StreamHeader = "Gridlink-Stream"

// endWait bounds Join's question.
const endWait = 5 * time.Second

// ID is the agent's name for the stream (StreamHeader); "" from an agent
// that does not name its streams.
func (s *Stream) ID() string { return s.id }

// End asks the agent why the stream ended, once its bytes have ended
// here: nil if its overlay side did not fail, else a *StreamError naming
// the reason (a hub on the way died; the peer was revoked). Ask before
// closing the stream (the agent's own closing of the overlay side is no
// failure, but what the far side then says of it might look like one). A
// stream handed to the agent reports its end in Wait instead.
func (s *Stream) End(ctx context.Context) error {
	if s.id == "" || s.client == nil {
		return nil // an agent that does not name its streams cannot tell
	}
	return s.client.StreamEnd(ctx, s.id)
}

// StreamEnd asks the agent why the stream it named id ended (see End).
func (c *Client) StreamEnd(ctx context.Context, id string) error {
	var ev Event
	if err := c.do(ctx, "GET", "/stream/"+id+"/end", nil, &ev); err != nil {
		return fmt.Errorf("agent: why the stream ended: %w", err)
	}
	if ev.Error != "" {
		return &StreamError{Kind: orElse(ev.Kind, KindFailed), Msg: "agent: stream: " + ev.Error}
	}
	return nil
}
