package hub

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A node's virtual addresses (issue 19: one IPv4, one IPv6) are kept by
// the hubs as its name is: unique across the overlay, the first holder
// keeps one. The node claims them from its hub (ClaimAddrs: a
// wire.KVirtual on its link, answered by wire.KVirtualAck) and the
// session claims them again on every re-attachment; any node looks up
// who holds an address (LookupAddr: wire.KLookupAddr, answered as a
// lookup by name). A refused address comes back as an *AddrTakenError
// naming the address and its holder, in the words the refusing hub logs,
// or as an *AddrOutsideError when it lies outside the grid's prefixes.
//
// Only hubs of wire.VersionVirtual or later keep virtual addresses: on an
// older hub ClaimAddrs and LookupAddr fail with ErrNoVirtual without
// sending anything (an older hub would close the link over a kind it does
// not know).
//
// Not yet: in a grid with a CA the certificate should bind the node's
// addresses (as Nebula's do), so that a member cannot take another's
// address by claiming it first; until then the first claimant keeps it.

// Errors of the virtual addresses (errors.Is).
var (
	// ErrAddrTaken: another node holds the virtual address (an
	// *AddrTakenError says which and where).
	ErrAddrTaken = errors.New("virtual address held by another node")
	// ErrNoVirtual: the session's hub is of a protocol version that keeps
	// no virtual addresses.
	ErrNoVirtual = errors.New("the hub keeps no virtual addresses")
	// ErrAddrOutside: the virtual address lies outside the grid's virtual
	// prefixes, as the hub knows them (an *AddrOutsideError).
	ErrAddrOutside = errors.New("virtual address outside the grid's prefixes")
)

// AddrOutsideError is a virtual address the hub refused because it lies
// outside the grid's virtual prefixes (wire.AddrOutside), in the words
// the hub logs. Another candidate in the same prefix would be refused
// too: the node's prefixes and the hubs' must agree. It wraps
// ErrAddrOutside and direct.ErrRefused.
type AddrOutsideError struct {
	Addr   netip.Addr
	Hub    string // the refusing hub
	Reason string
}

func (e *AddrOutsideError) Error() string {
	return fmt.Sprintf("virtual address %s refused by hub %s: %s", e.Addr, e.Hub, identity.PrintableLine(e.Reason))
}

func (e *AddrOutsideError) Unwrap() []error { return []error{ErrAddrOutside, direct.ErrRefused} }

// AddrTakenError is a virtual address refused to this node (or lost by
// it, when two hubs that each gave it to a node met): which one, the node
// that holds it and the refusing hub's reason, as that hub logs it. It
// wraps ErrAddrTaken and direct.ErrRefused.
type AddrTakenError struct {
	Addr   netip.Addr
	Holder identity.Machine // its ID, name, Hub and HubName
	Hub    string           // the refusing hub
	Reason string
	Lost   bool // the node held it until its hub met the holder's
}

func (e *AddrTakenError) Error() string {
	if e.Lost {
		return fmt.Sprintf("virtual address %s lost at hub %s: %s", e.Addr, e.Hub, e.Reason)
	}
	return fmt.Sprintf("virtual address %s refused by hub %s: %s", e.Addr, e.Hub, e.Reason)
}

func (e *AddrTakenError) Unwrap() []error { return []error{ErrAddrTaken, direct.ErrRefused} }

// AddrNotFoundError is a lookup of a virtual address no node holds on any
// hub that answered; it wraps ErrNotFound. Unreached names the hubs that
// could not be asked (empty from a hub older than wire.VersionUnreached).
type AddrNotFoundError struct {
	Addr      netip.Addr
	Unreached []wire.HubUnreached
}

func (e *AddrNotFoundError) Error() string {
	if len(e.Unreached) == 0 {
		return fmt.Sprintf("hub: lookup %s: no node holds this virtual address on any hub", e.Addr)
	}
	return fmt.Sprintf("hub: lookup %s: no node holds this virtual address on the hubs that answered; %s", e.Addr, unreachedText(e.Unreached))
}

func (e *AddrNotFoundError) Unwrap() error { return ErrNotFound }

// vipSession is a session's virtual addresses.
type vipSession struct {
	claimMu sync.Mutex // one claim at a time: the hub judges a node's claims in order

	// Under Session.mu.
	want   wire.Virtual // what the node claims (again on every attachment)
	wanted bool
	v4, v6 netip.Addr // what the hub said it holds
	err    error      // why it holds fewer: the last refusal or loss
	acks   map[uint64]chan *wire.VirtualAck
}

// ClaimAddrs claims this node's virtual addresses (v4 an IPv4 address, v6
// an IPv6 one, either zero for none) from its hub, which asks every hub
// of the overlay, and waits for the verdict: nil when the node holds
// both, else an *AddrTakenError per address refused (errors.Join), naming
// its holder. The claim replaces the node's earlier one, and the session
// makes it again on every re-attachment (VirtualAddrs tells the outcome).
// Without a hub it fails as requests do, and the next attachment claims.
func (s *Session) ClaimAddrs(ctx context.Context, v4, v6 netip.Addr) error {
	if err := wire.CheckVirtual(v4, v6); err != nil {
		return fmt.Errorf("hub: claim virtual addresses: %w", err)
	}
	s.mu.Lock()
	s.vip.want, s.vip.wanted = wire.Virtual{V4: v4, V6: v6}, true
	s.mu.Unlock()
	sl, err := s.current(ctx)
	if err != nil {
		return err
	}
	return s.claimOn(ctx, sl)
}

// VirtualAddrs are the virtual addresses this node holds, as its hub said
// last, and why it holds fewer than it claimed (nil: none refused).
func (s *Session) VirtualAddrs() (v4, v6 netip.Addr, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vip.v4, s.vip.v6, s.vip.err
}

// claimOn makes the node's claim on link sl and waits for the verdict.
func (s *Session) claimOn(ctx context.Context, sl *slink) error {
	s.vip.claimMu.Lock()
	defer s.vip.claimMu.Unlock()
	if sl.version < wire.VersionVirtual {
		err := fmt.Errorf("hub: claim virtual addresses: hub %s speaks version %d: %w", sl.hub.Name, sl.version, ErrNoVirtual)
		s.mu.Lock()
		s.vip.v4, s.vip.v6, s.vip.err = netip.Addr{}, netip.Addr{}, err
		s.mu.Unlock()
		return err
	}
	ch := make(chan *wire.VirtualAck, 1)
	s.mu.Lock()
	want := s.vip.want
	s.nextQ++
	want.Query = s.nextQ
	if s.vip.acks == nil {
		s.vip.acks = map[uint64]chan *wire.VirtualAck{}
	}
	s.vip.acks[want.Query] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.vip.acks, want.Query)
		s.mu.Unlock()
	}()
	if !sl.t.SendControl(&wire.Message{Kind: wire.KVirtual, Virtual: &want}) {
		return fmt.Errorf("hub: claim virtual addresses: hub link to %s lost", sl.hub.Name)
	}
	select {
	case a := <-ch:
		err := takenErrors(sl.hub.Name, a.Taken, false)
		s.mu.Lock()
		s.vip.v4, s.vip.v6, s.vip.err = a.V4, a.V6, err
		s.mu.Unlock()
		return err
	case <-sl.t.Done():
		return fmt.Errorf("hub: claim virtual addresses: hub link to %s lost", sl.hub.Name)
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("hub: claim virtual addresses: %w", ctx.Err())
	}
}

func takenErrors(hub string, taken []wire.AddrTaken, lost bool) error {
	var errs []error
	for _, t := range taken {
		if t.Code == wire.AddrOutside {
			errs = append(errs, &AddrOutsideError{Addr: t.Addr, Hub: hub, Reason: t.Reason})
			continue
		}
		errs = append(errs, &AddrTakenError{Addr: t.Addr, Holder: t.Holder, Hub: hub, Reason: t.Reason, Lost: lost})
	}
	return errors.Join(errs...)
}

// reclaimAddrsLocked claims the node's virtual addresses again on a newly
// installed link, in the background; s.mu is held.
func (s *Session) reclaimAddrsLocked(sl *slink) {
	if !s.vip.wanted {
		return
	}
	s.vip.v4, s.vip.v6 = netip.Addr{}, netip.Addr{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.claimOn(s.ctx, sl); err != nil && s.ctx.Err() == nil {
			s.logf("hub: node %s: %v", s.cfg.Machine, err)
		}
	}()
}

// virtualAck takes the hub's verdict on a claim, or (query 0) its word
// that the node lost an address it held.
func (sl *slink) virtualAck(a *wire.VirtualAck) {
	s := sl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Query != 0 {
		if ch := s.vip.acks[a.Query]; ch != nil {
			select {
			case ch <- a:
			default:
			}
		}
		return
	}
	if s.cur != sl {
		return
	}
	err := takenErrors(sl.hub.Name, a.Taken, true)
	s.vip.v4, s.vip.v6, s.vip.err = a.V4, a.V6, err
	if err != nil {
		s.logf("hub: node %s: %v", s.cfg.Machine, err)
	}
}

// LookupAddr asks the hubs which node holds the virtual address a; the
// Machine comes with Hub and HubName. No holder is an *AddrNotFoundError
// (errors.Is ErrNotFound).
func (s *Session) LookupAddr(ctx context.Context, a netip.Addr) (identity.Machine, error) {
	a = a.Unmap()
	if err := wire.CheckVirtualAddr(a); err != nil {
		return identity.Machine{}, fmt.Errorf("hub: lookup: %w", err)
	}
	sl, err := s.current(ctx)
	if err != nil {
		return identity.Machine{}, err
	}
	if sl.version < wire.VersionVirtual {
		return identity.Machine{}, fmt.Errorf("hub: lookup %s: hub %s speaks version %d: %w", a, sl.hub.Name, sl.version, ErrNoVirtual)
	}
	ch := make(chan *wire.Found, 1)
	s.mu.Lock()
	s.nextQ++
	q := s.nextQ
	s.lookups[q] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lookups, q)
		s.mu.Unlock()
	}()
	sl.t.SendControl(&wire.Message{Kind: wire.KLookupAddr, LookupAddr: &wire.LookupAddr{Query: q, Addr: a}})
	select {
	case f := <-ch:
		if len(f.Matches) == 0 {
			return identity.Machine{}, &AddrNotFoundError{Addr: a, Unreached: f.Unreached}
		}
		return f.Matches[0], nil
	case <-sl.t.Done():
		return identity.Machine{}, fmt.Errorf("hub: lookup %s: hub link to %s lost", a, sl.hub.Name)
	case <-s.done:
		return identity.Machine{}, ErrClosed
	case <-ctx.Done():
		return identity.Machine{}, fmt.Errorf("hub: lookup %s: %w", a, ctx.Err())
	}
}
