package vip

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net/netip"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// The default prefixes of the virtual network: wire's (100.96.0.0/12,
// fd67:726c::/32), those hubs admit claims in by default.
var (
	DefaultPrefix4 = wire.DefaultVirtual4
	DefaultPrefix6 = wire.DefaultVirtual6
)

// ErrBadPrefix matches every PrefixError.
var ErrBadPrefix = errors.New("vip: unusable address prefix")

// PrefixError is the refusal of a prefix no address can be derived in:
// not of the family asked for, not masked (host bits set), or with fewer
// than two host bits (nothing left once the network and broadcast
// addresses are skipped).
type PrefixError struct {
	Prefix netip.Prefix
	Reason string
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("vip: prefix %s: %s", e.Prefix, e.Reason)
}

func (e *PrefixError) Unwrap() error { return ErrBadPrefix }

// Addr derives a node's address in prefix from its identity: host bits =
// 1 + H mod (2^h - 2), where h is the number of host bits and H is
// SHA-256("gridlink vip address" || family || id || counter) read as a
// big-endian integer, counter a 32-bit big-endian number. The all-zeros
// (network; in IPv6 the subnet-router anycast) and all-ones (broadcast)
// host parts are never chosen. The same identity, prefix and counter give
// the same address on every start; counter 0 is a node's first choice,
// and when two nodes collide the later claimant takes counter 1, 2, ...
// (the next candidate, a fresh hash, not the next address).
func Addr(prefix netip.Prefix, id identity.ID, counter uint32) (netip.Addr, error) {
	if !prefix.IsValid() {
		return netip.Addr{}, &PrefixError{Prefix: prefix, Reason: "not a valid prefix"}
	}
	if prefix.Masked() != prefix {
		return netip.Addr{}, &PrefixError{Prefix: prefix, Reason: "host bits set (want " + prefix.Masked().String() + ")"}
	}
	total := prefix.Addr().BitLen()
	h := total - prefix.Bits()
	if h < 2 {
		return netip.Addr{}, &PrefixError{Prefix: prefix, Reason: "fewer than 2 host bits"}
	}
	family := byte(4)
	if prefix.Addr().Is6() {
		family = 6
	}
	hash := sha256.New()
	hash.Write([]byte("gridlink vip address"))
	hash.Write([]byte{family})
	hash.Write(id[:])
	hash.Write(binary.BigEndian.AppendUint32(nil, counter))
	sum := new(big.Int).SetBytes(hash.Sum(nil))

	space := new(big.Int).Lsh(big.NewInt(1), uint(h))
	space.Sub(space, big.NewInt(2))
	host := sum.Mod(sum, space)
	host.Add(host, big.NewInt(1))

	base := new(big.Int).SetBytes(prefix.Addr().AsSlice())
	base.Or(base, host)
	b := base.FillBytes(make([]byte, total/8))
	a, _ := netip.AddrFromSlice(b)
	return a, nil
}

// Addrs is a node's pair of addresses: Addr in prefix4 and in prefix6,
// with the same counter.
func Addrs(prefix4, prefix6 netip.Prefix, id identity.ID, counter uint32) (v4, v6 netip.Addr, err error) {
	if !prefix4.Addr().Is4() {
		return v4, v6, &PrefixError{Prefix: prefix4, Reason: "not an IPv4 prefix"}
	}
	if !prefix6.Addr().Is6() || prefix6.Addr().Is4In6() {
		return v4, v6, &PrefixError{Prefix: prefix6, Reason: "not an IPv6 prefix"}
	}
	if v4, err = Addr(prefix4, id, counter); err != nil {
		return v4, v6, err
	}
	v6, err = Addr(prefix6, id, counter)
	return v4, v6, err
}
