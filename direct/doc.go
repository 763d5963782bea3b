// Package direct is gridlink's direct connection layer (SmartSockets
// §3.2): everything one machine can do on its own to connect to another.
//
// It owns:
//
//   - the node's TCP listener (Listen), optionally confined to a port range,
//     which runs TLS handshakes concurrently under a timeout and hands out
//     only connections whose peer identity is known (Listener.Accept);
//   - the machine identifier of this host as seen by its listener
//     (Listener.Machine: interface addresses with the listening port);
//   - the order in which a target's addresses are tried (Order: preferred
//     networks, then private addresses in one of our own networks, then
//     public and observed ones, then other private ones);
//   - racing those addresses Happy-Eyeballs style, each attempt a TCP
//     connect plus a TLS 1.3 handshake that checks the peer is the machine
//     meant (Dialer.Dial), with one error naming every address and why it
//     failed;
//   - the request carried in ALPN and its refusal by the listener within
//     the handshake (ListenConfig.Check, ErrRefused);
//   - raw transports for hub links: plain TCP or a direct-tcpip channel
//     through an OpenSSH server, honouring ~/.ssh/config (sshconfig.go)
//     and known_hosts (Dialer.Transport);
//   - ErrorClass: a failure's kind from its type, for callers that log a
//     retried failure again only when its kind changes.
//
// It leaves out: keys and IDs (package identity), what a certificate proves
// (package pki, whose rules this package applies; see handshake.go),
// anything that needs the cooperation of another machine, such as hubs,
// reverse and relayed connections (packages hub and vconn), and the commit
// byte that hides race losers from applications (vconn).
//
// # Handshake
//
// A direct connection begins with a TLS 1.3 handshake in which both sides
// present a certificate for their Ed25519 key. In the ClientHello the
// dialler offers the ALPN protocols
//
//	"gridlink/1/" + request   (just "gridlink/1" for an empty request)
//	"gridlink/1-refused"
//
// and names itself in the server_name extension (its full ID, 52 base32
// characters). The listener decides at once, from that claim and the
// request, whether it accepts (ListenConfig.Accept and Check): it selects
// the request protocol to accept, or "gridlink/1-refused" to refuse. The
// claim is binding: the listener fails the handshake unless the dialler's
// certificate proves the ID it claimed. So the dialler knows when its
// handshake ends whether it was accepted, with no extra round trip; a
// refused dialler then reads the reason (see refusal.go), which the
// listener writes when its side of the handshake is done, and the
// connection closes.
//
// The claim and the request travel in clear in the ClientHello, as ALPN
// always does: an eavesdropper learns who dials whom, and what for.
package direct
