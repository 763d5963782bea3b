package status

import (
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// Printable is a name another machine gave (a node's, a hub's) as the
// command line shows it among other words: escaped and quoted unless it
// is printable ASCII without spaces (identity.Printable), so that it
// cannot rewrite the terminal of whoever reads a table.
func Printable(name string) string { return identity.Printable(name) }

// PrintableLine is a line of words another machine sent (a reason) with
// its control characters and non-ASCII runes escaped
// (identity.PrintableLine).
func PrintableLine(s string) string { return identity.PrintableLine(s) }

// NAT is what the node knows of this host's NAT (vconn.Node.NAT), as
// /status and /doctor report it.
type NAT struct {
	Class       string    `json:"class,omitempty"`      // e.g. "port-preserving, external address 198.51.100.161"
	Allocation  string    `json:"allocation,omitempty"` // one of the Alloc* words
	Predictable bool      `json:"predictable,omitempty"`
	At          time.Time `json:"at,omitzero"` // when it was classified or failed; zero: not yet
	Error       string    `json:"error,omitempty"`
}

// How a NAT allocates external ports, as NAT.Allocation names it (package
// nat's Allocation.String; the agent's tests hold the two together).
const (
	AllocNone       = "no NAT"
	AllocPreserving = "port-preserving"
	AllocSequential = "sequential"
	AllocRandom     = "random"
	AllocUnknown    = "unknown"
)

// PortMap is the node's inbound port mapping at its NAT gateway
// (vconn.Config.PortMap), as /status and /doctor report it.
type PortMap struct {
	Enabled    bool      `json:"enabled"`
	Mapped     bool      `json:"mapped"`
	Protocol   string    `json:"protocol,omitempty"` // "nat-pmp" or "upnp-igd"
	Gateway    string    `json:"gateway,omitempty"`
	Internal   string    `json:"internal,omitempty"`
	External   string    `json:"external,omitempty"`
	Advertised string    `json:"advertised,omitempty"` // the endpoint others are told; empty: none
	LeaseS     float64   `json:"lease_s,omitempty"`    // granted at the last (re)newal; 0 when mapped: permanent
	Expires    time.Time `json:"expires,omitzero"`
	Renewals   int       `json:"renewals,omitempty"`
	At         time.Time `json:"at,omitzero"`     // last tried or changed
	Error      string    `json:"error,omitempty"` // why there is none, or its last renewal's error
}

// ago says how long ago t was, in words.
func ago(t time.Time) string {
	d := time.Since(t)
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// Words says what is known of the NAT in plain words.
func (i NAT) Words() string {
	switch {
	case i.Error != "":
		return fmt.Sprintf("NAT: not known: the hubs could not observe this host's connections (%s, %s)", i.Error, ago(i.At))
	case i.At.IsZero():
		return "NAT: not classified yet (the node asks its hubs to observe its connections a few seconds after it starts)"
	}
	s := fmt.Sprintf("NAT: %s (classified %s from the hubs' observations)", i.Class, ago(i.At))
	switch i.Allocation {
	case AllocNone:
		return fmt.Sprintf("NAT: none: the hubs see this host's connections come from its own address (classified %s)", ago(i.At))
	case AllocRandom:
		return s + "; it picks external ports at random, so a splice cannot predict them: peers reach this host by a port mapping (--portmap), reverse or routed connections"
	case AllocUnknown:
		return s + "; the observations showed no pattern this node trusts"
	}
	if i.Predictable {
		return s + "; its ports can be predicted, so splicing can work"
	}
	return s
}

// Words says in plain words whether a port was mapped, and where.
func (i PortMap) Words() string {
	lease := "a permanent lease"
	if i.LeaseS > 0 {
		lease = fmt.Sprintf("a lease of %v, renewed %d times", time.Duration(i.LeaseS*float64(time.Second)), i.Renewals)
	}
	switch {
	case !i.Enabled:
		return "port mapping: off (start the node with --portmap to ask the NAT gateway for an inbound port by UPnP IGD or NAT-PMP)"
	case i.Mapped && i.Advertised != "":
		s := fmt.Sprintf("port mapping: %s from %s maps %s to %s (%s); others reach this node directly at %s", i.Protocol, i.Gateway, i.External, i.Internal, lease, i.Advertised)
		if i.Error != "" {
			s += "; but its last renewal failed: " + i.Error
		}
		return s
	case i.Mapped && i.Error != "":
		return fmt.Sprintf("port mapping: %s from %s mapped %s to %s, but renewing it fails and its lease ran out: not advertised (%s)", i.Protocol, i.Gateway, i.External, i.Internal, i.Error)
	case i.Mapped:
		return fmt.Sprintf("port mapping: %s from %s maps %s to %s, an address this node's direct listener is not bound to: not advertised", i.Protocol, i.Gateway, i.External, i.Internal)
	case i.Error != "":
		return fmt.Sprintf("port mapping: none, asked %s: %s (asked again every few minutes)", ago(i.At), i.Error)
	}
	return "port mapping: none yet: asking the gateway"
}

// HubWords says which hub the node is on, for `gridlink status`: its
// name and ID, or what its session is doing (Attach) while it has none;
// on a hub other than its first, which of its hubs and whether it returns
// to the first.
func (a *Agent) HubWords() string {
	if a.Attach != "" {
		return PrintableLine(a.Attach)
	}
	s := fmt.Sprintf("%s (%s)", Printable(a.Node.HubName), a.Node.Hub.Short())
	if a.HubChoice > 1 {
		s += fmt.Sprintf(", its hub number %d of %d: away from its first", a.HubChoice, a.Hubs)
		if a.NoReturn {
			s += ", where it does not return (--no-return-home)"
		} else {
			s += ", which it probes to return to"
		}
	}
	return s
}
