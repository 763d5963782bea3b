// Package tun is the node's seam to a TUN device: the batch device the
// virtual IP network (vip) will read packets from and write packets to,
// built on golang.zx2c4.com/wireguard/tun.
//
// It owns:
//   - Device, the batch interface the overlay programs against: Read and
//     Write of packet batches at an offset, BatchSize, MTU, Name, Events,
//     Close (the library's tun.Device without its File escape hatch);
//   - on Linux, the constructors: Create makes a new TUN device with the
//     offloads on (IFF_VNET_HDR; TSO4/TSO6 and, from Linux 6.2, USO: the
//     kernel hands over 64 KiB batches that Read cuts into wire-sized
//     packets, and Write coalesces consecutive TCP/UDP segments of a flow
//     into one batch again, GRO), and Attach opens an existing device (one
//     that "ip tuntap add" made) with or without them;
//   - the contract of the buffers (Offset of headroom, MaxPacket bytes of
//     capacity) under which the offloads work;
//   - on Linux, a node's device on the host (host.go, host_linux.go:
//     Setup): created, its addresses on it, their prefixes routed through
//     it, its link up, with rtnetlink (github.com/vishvananda/netlink);
//     all of it taken off again on Close; failures as a SetupError naming
//     the step (os.ErrPermission: needs root or CAP_NET_ADMIN), a prefix
//     routed elsewhere as a RouteTakenError.
//
// It leaves out: the link state of a device made by Create or attached
// (whoever makes the device sets it; Create only sets the MTU), packet parsing
// and routing (vip's job), network namespaces (a caller that wants the
// device in another namespace calls Attach on a thread that is there),
// and every platform but Linux: elsewhere the constructors return
// ErrUnsupported. The in-memory fake for tests is package tuntest.
package tun
