package hub

import (
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// NotFoundError is a lookup by name that no hub answered with a match; it
// wraps ErrNotFound. During a partition the node may be up behind a hub
// that could not be asked: Unreached names those hubs (as the node's hub
// saw them), Answered counts the hubs that searched, the node's hub
// included (0 and empty from a hub older than wire.VersionUnreached:
// unknown).
type NotFoundError struct {
	Node      string
	Hub       string // the node's hub, which asked the others
	Answered  int
	Unreached []wire.HubUnreached
}

func (e *NotFoundError) Error() string {
	if e.Answered == 0 && len(e.Unreached) == 0 {
		return fmt.Sprintf("hub: lookup %s: %v on any hub", e.Node, ErrNotFound)
	}
	if len(e.Unreached) == 0 {
		return fmt.Sprintf("hub: lookup %s: %v on any hub (%s answered)", e.Node, ErrNotFound, hubCount(e.Answered))
	}
	return fmt.Sprintf("hub: lookup %s: %v on the %s that answered; %s", e.Node, ErrNotFound, hubCount(e.Answered), unreachedText(e.Unreached))
}

func (e *NotFoundError) Unwrap() error { return ErrNotFound }

func hubCount(n int) string {
	if n == 1 {
		return "1 hub"
	}
	return fmt.Sprintf("%d hubs", n)
}

// unreachedText names the hubs a lookup could not ask and why, e.g.
// "2 hubs could not be asked: das3v (unreachable since 01:02:03),
// hiroshi (no answer in 2s)".
func unreachedText(us []wire.HubUnreached) string {
	parts := make([]string, 0, len(us))
	for _, u := range us {
		name := u.Name
		if name == "" {
			name = u.Hub.Short()
		}
		switch {
		case u.Cause == wire.UnreachedRoute && u.SinceMs > 0:
			parts = append(parts, fmt.Sprintf("%s (unreachable since %s)", name, time.UnixMilli(u.SinceMs).UTC().Format(time.TimeOnly)))
		case u.Cause == wire.UnreachedRoute:
			parts = append(parts, fmt.Sprintf("%s (unreachable)", name))
		default:
			parts = append(parts, fmt.Sprintf("%s (no answer in %v)", name, time.Duration(u.WaitMs)*time.Millisecond))
		}
	}
	verb := "hubs could not be asked"
	if len(us) == 1 {
		verb = "hub could not be asked"
	}
	return fmt.Sprintf("%d %s: %s", len(us), verb, strings.Join(parts, ", "))
}
