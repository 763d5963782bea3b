// Package wan is gridlab's wide-area network: a userspace emulator that plays
// "the internet" between the lab's sites.
//
// Every site's gateway namespace holds a persistent TUN device (usually
// wan0, IFF_TUN|IFF_NO_PI) whose address and default route the lab builder
// has already configured. The emulator attaches to all of them from one
// process, reads the IP packets each site sends, picks the destination site
// by longest-prefix match on the destination address, passes the packet
// through the emulated link for that ordered pair of sites and writes it into
// the destination site's TUN device. It never opens a socket.
//
// Each ordered pair of sites has its own pipe, modelled after dummynet: a
// Bernoulli loss stage, a tail-drop FIFO drained at the link rate and a fixed
// propagation delay (see [Model]). The pure model is separate from the I/O so
// that it can be tested with synthetic time.
//
// # What the package owns
//
//   - attaching to the TUN devices (entering each namespace on a locked OS
//     thread only for the open) and detaching again on Close;
//   - routing between sites, the per-pair pipes, precise release of packets
//     (timerfd wake-ups, a short spin for the last tens of microseconds) and
//     the per-pair and per-port counters;
//   - offload negotiation: by default the devices are opened with
//     IFF_VNET_HDR and TCPv4 segmentation offload, so a TCP sender hands the
//     emulator 64 KiB super-packets. Such a batch passes a pipe intact only
//     when that cannot be observed (no loss, no rate limit); otherwise the
//     emulator segments it exactly as the kernel would and every segment
//     meets the pipe on its own.
//
// # What it leaves out
//
// Creating namespaces, TUN devices, addresses and routes (the lab builder's
// job); NAT, firewalling, reordering, jitter, duplication, corruption and
// bandwidth sharing between pairs (each ordered pair is an independent
// link, as between sites on the real internet with uncongested cores); link
// layer overhead (Rate counts IP bytes).
package wan
