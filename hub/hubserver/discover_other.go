//go:build !linux

package hubserver

import (
	"context"
	"errors"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// ErrNoDiscovery is discovery on a system other than Linux, where it is
// not built: give hubs by address.
var ErrNoDiscovery = errors.New("hub discovery: only built for Linux; give hubs by address")

// Announcer answers discovery queries for a hub (Linux only).
type Announcer struct{}

// ListenDiscovery fails with ErrNoDiscovery here.
func ListenDiscovery(string, identity.ID, uint16) (*Announcer, error) { return nil, ErrNoDiscovery }

// Serve returns ErrNoDiscovery.
func (a *Announcer) Serve(context.Context) error { return ErrNoDiscovery }

// Close does nothing.
func (a *Announcer) Close() error { return nil }

// Discover fails with ErrNoDiscovery here.
func Discover(context.Context, time.Duration) ([]Found, error) { return nil, ErrNoDiscovery }
