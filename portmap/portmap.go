// Package portmap asks the NAT gateway of the local network for an inbound
// TCP port mapping to a local port, and keeps it: it speaks NAT-PMP
// (RFC 6886) and UPnP IGD (WANIPConnection 1 and 2, WANPPPConnection 1),
// renews the mapping before its lease runs out and deletes it at the
// gateway on Close. A peer on the internet then reaches the local listener
// at the mapping's external address, whatever the NAT's own port
// allocation (where splicing cannot work).
//
// It owns the conversation with the gateway only. Deciding to map a port,
// telling peers the external address (the hubs' and the node's job), UDP
// mappings and PCP (RFC 6887) are left out; so are nested NATs: a mapping
// on a gateway that is itself behind a NAT is not reachable from the
// internet, and the external address says so only if the gateway knows.
//
// Network namespaces: Map and a Mapping's renewals make sockets from
// several goroutines and find the gateway from the calling thread's
// routes, so run them in a process that is wholly inside the network
// namespace whose gateway is meant, not on a thread that entered it.
package portmap

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Protocol is a port mapping protocol.
type Protocol string

// The protocols Map speaks.
const (
	NATPMP Protocol = "nat-pmp"  // NAT Port Mapping Protocol, RFC 6886
	UPnP   Protocol = "upnp-igd" // UPnP Internet Gateway Device, v1 or v2
)

// Config says how to map. The zero value maps the same external port as
// the internal one for an hour (renewed), asking the default route's
// gateway by NAT-PMP and any UPnP IGD on the LAN at once, waiting 2 s for
// them.
type Config struct {
	// Protocols lists the protocols to try; nil means both, asked at once:
	// the first gateway to answer maps the port, the other is asked only
	// if that fails.
	Protocols []Protocol
	// Gateway is the NAT-PMP server; the zero value means the gateway of
	// the default route (of the calling thread's network namespace).
	Gateway netip.Addr
	// Timeout bounds the wait for gateways to answer: NAT-PMP's
	// retransmissions and the UPnP SSDP search (which lasts at least 1 s);
	// 0 means 2 s. SOAP requests to an IGD that answered get as long again.
	Timeout time.Duration
	// Lifetime is the lease asked for; 0 means 1 hour. The gateway may
	// grant another; the mapping is renewed at half the granted lease.
	Lifetime time.Duration
	// ExternalPort is the external port asked for; 0 means the internal
	// port. The gateway may grant another (Status tells).
	ExternalPort uint16
	// Description names the mapping in an IGD's table; "" means "gridlink".
	Description string
	// OnChange, if not nil, is called (from the renewal goroutine, never
	// concurrently) after a renewal that changed the external address or
	// port, that failed, or that succeeded after a failure.
	OnChange func(Status)
}

// Defaults of Config's zero fields.
const (
	DefaultTimeout     = 2 * time.Second
	DefaultLifetime    = time.Hour
	DefaultDescription = "gridlink"
)

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c Config) lifetime() time.Duration {
	if c.Lifetime <= 0 {
		return DefaultLifetime
	}
	return max(c.Lifetime, time.Second)
}

func (c Config) description() string {
	if c.Description == "" {
		return DefaultDescription
	}
	return c.Description
}

func (c Config) wants(p Protocol) bool {
	if c.Protocols == nil {
		return true
	}
	for _, q := range c.Protocols {
		if q == p {
			return true
		}
	}
	return false
}

// Status is the state of a mapping.
type Status struct {
	Protocol Protocol
	Gateway  string         // who granted it: an address (NAT-PMP) or a URL (UPnP)
	Internal netip.AddrPort // the local address and port mapped to
	External netip.AddrPort // where the internet reaches it
	Lifetime time.Duration  // granted at the last (re)newal; 0 means permanent
	Expires  time.Time      // zero when permanent
	Renewals int            // successful renewals so far
	Err      error          // the last renewal's error; nil once one succeeds
}

func (s Status) String() string {
	return fmt.Sprintf("%s mapping %s -> %s by %s, lease %v", s.Protocol, s.External, s.Internal, s.Gateway, s.Lifetime)
}

// grant is what a gateway granted.
type grant struct {
	external netip.AddrPort
	lifetime time.Duration // 0: permanent
}

// client is one protocol's conversation with one gateway.
type client interface {
	protocol() Protocol
	gateway() string
	local() netip.Addr // the local address the gateway maps to
	// add asks for a mapping of internal to external port ext, or renews
	// the one held; the gateway may grant another external port.
	add(ctx context.Context, internal, ext uint16, lifetime time.Duration) (grant, error)
	remove(ctx context.Context, internal, ext uint16) error
}

// discoverers find a gateway that speaks a protocol (replaced in tests).
var discoverers = map[Protocol]func(context.Context, Config) (client, error){
	NATPMP: discoverNATPMP,
	UPnP:   discoverIGD,
}

// MapError is the failure of Map: what every protocol tried said.
type MapError struct {
	Port uint16
	Errs []error
}

func (e *MapError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("portmap: no gateway mapped tcp port %d: %s", e.Port, strings.Join(msgs, "; "))
}

func (e *MapError) Unwrap() []error { return e.Errs }

// ErrNoProtocol is returned when Config.Protocols names none Map speaks.
var ErrNoProtocol = errors.New("portmap: no protocol to try (want nat-pmp or upnp-igd)")

// Map asks the gateway for an inbound TCP mapping to internalPort on this
// host and keeps it until Close. It fails when no gateway answered within
// Config.Timeout or every one that did refused; the error says, per
// protocol, what happened.
func Map(ctx context.Context, cfg Config, internalPort uint16) (*Mapping, error) {
	if internalPort == 0 {
		return nil, errors.New("portmap: internal port 0")
	}
	type found struct {
		c   client
		err error
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan found, 2)
	asked := 0
	for _, p := range []Protocol{NATPMP, UPnP} {
		if cfg.wants(p) {
			asked++
			discover := discoverers[p]
			go func() { c, err := discover(dctx, cfg); results <- found{c, err} }()
		}
	}
	if asked == 0 {
		return nil, ErrNoProtocol
	}
	merr := &MapError{Port: internalPort}
	for ; asked > 0; asked-- {
		f := <-results
		if f.err != nil {
			merr.Errs = append(merr.Errs, f.err)
			continue
		}
		m, err := newMapping(ctx, cfg, f.c, internalPort)
		if err == nil {
			cancel() // stop the other search
			return m, nil
		}
		merr.Errs = append(merr.Errs, err)
	}
	return nil, merr
}
