// Package hub is the node's side of gridlink's overlay of hubs
// (SmartSockets §3.3.1) and the protocol pieces that a node and a hub
// both run; the hub server is package hub/hubserver (like tailscale's
// derp and derp/derpserver), which a node's program does not link in.
//
// A node attaches to a hub with a Session (session.go): Attach waits for
// a hub, Connect attaches in the background and retries (attach.go); a
// request made while the session has no hub fails at once with a
// *NotAttachedError. A session that re-attached to another of its hubs
// returns to the first once that admits it again (home.go). Over its attachment a node looks nodes up, sends and
// receives routed messages, asks for the hubs its hub knows (requests.go),
// updates its machine identifier (machine.go), claims and looks up
// virtual addresses (vipaddr.go), and opens and accepts
// circuits: relayed connections through the hubs with end-to-end flow
// control (circuit.go, demux.go).
//
// Shared with the hub server: the trunk (trunk.go), the connection
// that carries wire frames between a node and its hub or between two
// hubs after its handshake, with its keepalive (a trunk between two hubs
// may carry further connections, its lanes: what proves one belongs to
// the trunk is lane.go's, the rest hub/hubserver's); the TCP congestion
// control of a connection (congestion_linux.go); the handshake that seals
// a trunk's control frames and the hello exchange (secure.go); a trunk's
// read buffer, which an idle trunk borrows none of (readbuf.go); and a
// hub's refusal of a trunk after its hello, as both ends name it
// (refusal.go). A session names its process in its hellos (instance.go),
// so that a hub holding its old link lets it back at once while refusing
// another process with its identity. "Trunk" is the hub overlay's word: package link's
// striped links and xfer's transfer links are other things.
//
// The package leaves out the hub's routing, switching and admission
// (hub/hubserver), the frame and message encodings (package wire), the
// identity handshake and certificate chains (pki), how a transport is
// reached (the caller's Dial, from package direct), and the choice
// between direct, reverse and routed connections (package vconn).
package hub
