package vip

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/tun"
)

// mtuDevice is a device whose MTU the test sets, announcing each change
// with EventMTUUpdate, as a monitored Linux device does.
type mtuDevice struct {
	tun.Device
	mtu    atomic.Int64
	events chan tun.Event
}

func (d *mtuDevice) MTU() (int, error)        { return int(d.mtu.Load()), nil }
func (d *mtuDevice) Events() <-chan tun.Event { return d.events }

func (d *mtuDevice) set(mtu int) {
	d.mtu.Store(int64(mtu))
	d.events <- tun.EventMTUUpdate
}

// A peer with a larger MTU sends a packet larger than this node's device
// takes: it gets ICMP fragmentation needed / packet too big with this
// node's MTU, over the tunnel; when the device's MTU changes, the tunnel
// MTU follows, both ways.
func TestReceivedTooBigAnsweredAndMTUFollowsDevice(t *testing.T) {
	var bdev *mtuDevice
	g := newGrid(t, 2, func(c *Config) {
		if bdev == nil && c.ID == testID(101) {
			bdev = &mtuDevice{Device: c.Device, events: make(chan tun.Event, 1)}
			bdev.mtu.Store(1280)
			c.Device = bdev
		}
	})
	a, b := g.nodes[0], g.nodes[1]
	if a.net.MTU() != 1500 || b.net.MTU() != 1280 {
		t.Fatalf("MTUs %d and %d, want 1500 and 1280", a.net.MTU(), b.net.MTU())
	}
	big4, big6 := udp4(a.v4, b.v4, "big", 1400), udp6(a.v6, b.v6, "big", 1400)
	a.send(t, big4)
	if mtu := checkICMPv4(t, a.recv(t, "ICMP fragmentation needed from b"), 3, 4, b.v4, a.v4, big4); mtu != 1280 {
		t.Errorf("fragmentation needed with MTU %d, want b's 1280", mtu)
	}
	a.send(t, big6)
	if mtu := checkICMPv6(t, a.recv(t, "ICMPv6 packet too big from b"), 2, 0, b.v6, a.v6, big6); mtu != 1280 {
		t.Errorf("packet too big with MTU %d, want b's 1280", mtu)
	}
	s := b.net.Stats()
	if s.Drops.TooBig != 2 || s.Peer(a.id).TooBig != 2 || len(b.in) != 0 {
		t.Errorf("b: %+v, a %+v; want 2 dropped as too big", s.Drops, s.Peer(a.id))
	}

	bdev.set(1400)
	testwait.Until(t, "b's tunnel MTU following its device to 1400", 0, func() bool { return b.net.MTU() == 1400 })
	a.send(t, big4)
	expect(t, b, big4, "a 1400-byte packet once b's device takes it")
	if s := b.net.Stats(); s.MTU != 1400 || s.DeviceMTU != 1400 {
		t.Errorf("b's stats say MTU %d, device %d", s.MTU, s.DeviceMTU)
	}

	bdev.set(1300)
	testwait.Until(t, "b's tunnel MTU following its device to 1300", 0, func() bool { return b.net.MTU() == 1300 })
	out := udp4(b.v4, a.v4, "from b", 1350)
	b.send(t, out)
	if mtu := checkICMPv4(t, b.recv(t, "ICMP fragmentation needed at b"), 3, 4, a.v4, b.v4, out); mtu != 1300 {
		t.Errorf("b's own packet: MTU %d, want 1300", mtu)
	}
	fits := udp4(b.v4, a.v4, "fits", 1300)
	b.send(t, fits)
	expect(t, a, fits, fmt.Sprint("a packet of b's new MTU"))
}

// A fixed Config.MTU stays when the device's changes.
func TestFixedMTUStays(t *testing.T) {
	var dev *mtuDevice
	g := newGrid(t, 1, func(c *Config) {
		dev = &mtuDevice{Device: c.Device, events: make(chan tun.Event, 1)}
		dev.mtu.Store(1500)
		c.Device, c.MTU = dev, 1280
	})
	a := g.nodes[0]
	dev.set(9000)
	testwait.Until(t, "the device MTU followed", 0, func() bool { return a.net.Stats().DeviceMTU == 9000 })
	if a.net.MTU() != 1280 {
		t.Errorf("tunnel MTU %d, want the fixed 1280", a.net.MTU())
	}
}
