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
//     (packet.go: Parse, PacketError naming what was wrong);
//   - the path itself (Network): batches read from the tun.Device,
//     packets whose source is not this node's dropped and counted, the
//     destination's node found through a Resolver (its answers, for
//     destinations and for peers' sources, renewed every minute in the
//     background, route.go, source.go), one connection per
//     peer from a Dialer (or given to Accept), length-prefixed frames
//     written in batches from a bounded per-peer queue that drops and
//     counts when full and never holds up other peers (frame.go); on
//     receive, every packet's source checked against the sending peer's
//     identity (the connection's) and its destination against this
//     node's addresses, then batches written to the device;
//   - the ICMP errors the path answers with inside the tunnel (icmp.go):
//     fragmentation needed / packet too big with the tunnel MTU for a
//     packet larger than it (the tunnel never drops one silently, and
//     never fragments), host / address unreachable for a destination no
//     node holds;
//   - the counters: per peer (packets and bytes each way, drops) and per
//     drop reason (Stats).
//
// It leaves out: the TUN device itself (package tun; tests use
// tun/tuntest), the addresses and routes on the host (later), the
// directory of virtual addresses (the hubs, behind Resolver), the
// connections between nodes and their authentication (vconn, behind
// Dialer and Accept), names (DNS, later) and access rules (later).
package vip
