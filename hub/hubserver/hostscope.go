package hubserver

import (
	"net/netip"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A node's host-scoped addresses (identity.HostScoped: loopback,
// link-local, unspecified; the address a hub observed for a node that
// attached over loopback is one) mean something only on the node's own
// host: a peer elsewhere that dials 127.0.0.1:PORT reaches itself, or
// another service of its own host. So they cross a trunk only when both
// of its ends are on one host, which its remote address being loopback
// shows: a hub keeps a node's only when the node attached over loopback
// (nodeRecord), drops them from what a peer elsewhere sends it (control)
// and from what it sends a peer elsewhere (peer.send, and a circuit's
// opener in switch.go). A lookup answer therefore carries them only when
// every trunk on its way, the node's and the requester's included, stayed
// on one host.

// onHost reports whether remote, a trunk's other end as this hub sees it,
// is on this hub's host.
func onHost(remote netip.AddrPort) bool { return remote.Addr().Unmap().IsLoopback() }

// onHost reports whether p's end of its trunk is on this hub's host.
func (p *peer) onHost() bool { return onHost(p.t.Remote()) }

// fromHost is m as it came from p: without host-scoped addresses unless p
// is on this hub's host.
func (p *peer) fromHost(m *wire.Message) *wire.Message {
	if p.onHost() {
		return m
	}
	return wire.StripHostScoped(m)
}

// across is machine m as it may cross p's trunk, either way: without
// host-scoped addresses unless p is on this hub's host.
func (p *peer) across(m identity.Machine) identity.Machine {
	if !p.onHost() {
		m, _ = m.WithoutHostScoped()
	}
	return m
}
