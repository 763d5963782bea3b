package proxy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gridlink/gridlink/identity"
)

// Restriction entries (the policy of RestrictedLanguage, see
// OIDProxyCertInfo): SERVICE names a service at any node, SERVICE@NODEID
// the service at the one node whose identity key is NODEID. A connection
// to a service at a node is within a restriction if some entry names the
// service and either no node or that node (Permits).
//
// A proxy's proxies can only narrow: every entry of the child must be
// covered by an entry of its issuer, the same entry or the issuer's
// SERVICE for the child's SERVICE@NODEID (Subset). A child's plain SERVICE
// under an issuer's SERVICE@NODEID is wider, and refused.

// MaxEntryLen is the longest entry: a 32-character service, '@' and an ID.
const MaxEntryLen = 32 + 1 + 52

var serviceRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,31}$`)

// Entry is the restriction entry for service at node (any node if node is
// zero).
func Entry(service string, node identity.ID) string {
	if node.IsZero() {
		return service
	}
	return service + "@" + node.String()
}

// SplitEntry splits an entry into its service and its node's ID text (""
// when the entry names no node).
func SplitEntry(e string) (service, node string) {
	service, node, _ = strings.Cut(e, "@")
	return service, node
}

// CheckEntry says what is wrong with a restriction entry's form, or nil.
func CheckEntry(e string) error { return checkEntry(e) }

func checkEntry(e string) error {
	if len(e) > MaxEntryLen {
		return fmt.Errorf("restriction entry of %d bytes, at most %d", len(e), MaxEntryLen)
	}
	svc, node, hasNode := strings.Cut(e, "@")
	if !serviceRE.MatchString(svc) {
		return fmt.Errorf("bad service name %q (want a letter, then letters, digits and '-', at most 32)", svc)
	}
	if hasNode {
		id, err := identity.ParseID(node)
		if err != nil || id.String() != node || id.IsZero() {
			return fmt.Errorf("bad node in restriction entry %q: want SERVICE@ID, the node's ID in full (52 lower-case base32 characters)", e)
		}
	}
	return nil
}

// normServices checks, sorts and dedups a restriction's entries.
func normServices(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, errors.New("a restriction lists no service")
	}
	out := slices.Clone(in)
	for _, s := range out {
		if err := checkEntry(s); err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxServices {
		return nil, fmt.Errorf("a restriction of %d entries, at most %d", len(out), MaxServices)
	}
	return out, nil
}

// covers reports whether the entry parent allows everything child does.
func covers(parent, child string) bool {
	if parent == child {
		return true
	}
	ps, pn := SplitEntry(parent)
	cs, _ := SplitEntry(child)
	return pn == "" && ps == cs
}

// Subset reports whether restriction a is within restriction b: every
// entry of a covered by one of b (the same entry, or b's SERVICE for a's
// SERVICE@NODEID).
func Subset(a, b []string) bool {
	for _, e := range a {
		if !slices.ContainsFunc(b, func(p string) bool { return covers(p, e) }) {
			return false
		}
	}
	return true
}

// Intersect is what both restrictions allow (sorted, no repeats; empty if
// nothing): for each pair of entries of one service, the narrower.
func Intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			switch {
			case covers(x, y):
				out = append(out, y)
			case covers(y, x):
				out = append(out, x)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Permits reports whether restriction (nil: none) allows service at the
// node whose ID is node.
func Permits(restriction []string, service string, node identity.ID) bool {
	if restriction == nil {
		return true
	}
	id := node.String()
	for _, e := range restriction {
		if s, n := SplitEntry(e); s == service && (n == "" || n == id) {
			return true
		}
	}
	return false
}

// ReachesNode reports whether restriction (nil: none) allows some service
// at node.
func ReachesNode(restriction []string, node identity.ID) bool {
	if restriction == nil {
		return true
	}
	id := node.String()
	for _, e := range restriction {
		if _, n := SplitEntry(e); n == "" || n == id {
			return true
		}
	}
	return false
}
