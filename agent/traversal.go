package agent

import (
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

// natInfo is what the node knows of this host's NAT, as /status and
// /doctor report it.
func natInfo(n *vconn.Node) status.NAT {
	c, at, err := n.NAT()
	info := status.NAT{At: at}
	switch {
	case err != nil:
		info.Error = err.Error()
	case !at.IsZero():
		info.Class, info.Allocation, info.Predictable = c.String(), c.Allocation.String(), c.Predictable()
	}
	return info
}

// portMapInfo is the node's port mapping, as /status and /doctor report
// it.
func portMapInfo(n *vconn.Node) status.PortMap {
	s := n.PortMap()
	info := status.PortMap{Enabled: s.Enabled, Mapped: s.Mapped, At: s.At}
	if s.Err != nil {
		info.Error = s.Err.Error()
	}
	if s.Advertised.IsValid() {
		info.Advertised = s.Advertised.String()
	}
	if s.Mapped {
		st := s.Status
		info.Protocol, info.Gateway = string(st.Protocol), st.Gateway
		info.Internal, info.External = st.Internal.String(), st.External.String()
		info.LeaseS, info.Expires, info.Renewals = st.Lifetime.Seconds(), st.Expires, st.Renewals
	}
	return info
}
