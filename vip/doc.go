// Package vip is the packet path of gridlink's virtual IP network: every
// node of a grid on one private IP network, its packets carried over the
// overlay between the nodes' TUN devices.
//
// It owns:
//   - the addresses (addr.go): a node's IPv4 address in a configurable
//     prefix (DefaultPrefix4, 100.96.0.0/12, inside the shared space
//     100.64.0.0/10) and its IPv6 ULA (DefaultPrefix6, fd67:726c::/32),
//     both derived from its identity, stable across restarts; a counter
//     gives the next candidate when two nodes collide;
//   - the strict decoding of the IP header fields the path reads
//     (packet.go: Parse, PacketError naming what was wrong) and of the
//     transport header behind them, IPv6 extension headers walked
//     (transport.go: TransportError);
//   - the path itself (Network): batches read from the tun.Device,
//     packets whose source is not this node's dropped and counted, the
//     destination's node found through a Resolver (its answers, for
//     destinations and for peers' sources, renewed every minute in the
//     background, route.go, source.go), length-prefixed frames written in
//     batches from a bounded per-peer queue that drops and counts when
//     full and never holds up other peers (frame.go; framed in place in
//     the buffers the device was read into, buf.go); on receive, every
//     packet's source checked against the sending peer's identity (the
//     connection's; the directory's answers kept per peer, across its
//     connections, a negative one asked again after a second: a node
//     whose hub died claims its addresses again elsewhere, source.go)
//     and its destination against this node's addresses, then batches
//     written to the device;
//   - the connections to a peer (link.go, shortcut.go): the first from a
//     Dialer (often routed through the hubs: quick to set up) or given to
//     Accept; every one read, the best one sent on (by its vconn Method:
//     direct > reverse > splice > routed; then the one dialed by the lower
//     identity, so both ends pick the same). While the best is routed, a
//     ShortcutDialer is tried in the background (IPOP's shortcuts, seed
//     002), backing off 2 s to 60 s; a better connection takes over the
//     sending between two batches, the queue intact, and the one it
//     replaces is closed after a grace period in which it still delivers
//     (or, when the peer keeps sending on it alone, it is the one kept:
//     the peer lost the other); when the last connection to a peer ends
//     (a hub on a routed path died, a path was cut), a peer that had
//     packets within redialIdle is dialed again, attempts overlapping
//     (a new one redialMin to redialMax after the last), until a path
//     works, its queue kept meanwhile (redial.go), so that an inner
//     TCP's sparse retransmissions are not each lost to a failed dial;
//     the last TCP segments written on a connection that ends are
//     written again first on the one that takes over (replay.go), so
//     that what the dead one swallowed need not wait for the inner
//     TCP's backed-off timer;
//   - the carriers (carrier.go): while a peer is on a shortcut and
//     packets of several flows go to it, more connections to it on
//     CarrierPort (as many as both ends agree on in a hello, Config.Carriers),
//     each flow hashed onto one so it keeps its order; a carrier that
//     ends moves its flows to the others; a node without carriers keeps
//     one connection;
//   - the access rules (rules.go, admit.go, conntrack.go): Rules in a
//     text form, applied by the receiving node to every packet from a
//     peer by the peer's proof (its certificate chain's user, groups,
//     node name, or its identity); answers to this node's own flows pass;
//     a denied packet is dropped, counted, logged and answered with ICMP
//     administratively prohibited over the tunnel;
//   - the ICMP errors the path answers with (icmp.go): into the device,
//     fragmentation needed / packet too big with the tunnel MTU for a
//     packet larger than it (the tunnel never drops one silently, and
//     never fragments), host / address unreachable for a destination no
//     node holds; back to the peer over the tunnel, too big with this
//     node's device MTU for a received packet larger than it, and
//     prohibited; never about an ICMP error or a later fragment, and at
//     most 100 a second to peers;
//   - the MTUs (mtu.go): the tunnel MTU (Config.MTU, or the device's) and
//     the device's, followed through its EventMTUUpdate;
//   - the counters: per peer (path and since when, switches, packets and
//     bytes each way, drops by reason, queue) and per drop reason
//     (Stats, plain JSON-friendly data).
//
// It leaves out: the TUN device itself (package tun; tests use
// tun/tuntest), the addresses and routes on the host, the directory of
// virtual addresses (the hubs, behind Resolver), the connections between
// nodes, how they are set up and their authentication (vconn, behind
// Dialer, ShortcutDialer and Accept; the proof and method are read from
// the connection when it has them), names (DNS), and mapping Stats into
// the status report (the node's wiring).
package vip
