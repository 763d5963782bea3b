package vip

import (
	"github.com/gridlink/gridlink/tun"
)

// setMTU takes the device's MTU: the tunnel MTU follows it unless
// Config.MTU fixes it.
func (n *Network) setMTU(devMTU int) {
	n.devMTU.Store(int64(devMTU))
	if n.cfg.MTU > 0 {
		n.mtu.Store(int64(n.cfg.MTU))
	} else {
		n.mtu.Store(int64(devMTU))
	}
}

// watchDevice follows the device's events: on EventMTUUpdate, the MTU
// the device reports now becomes the device MTU (received packets larger
// than it are answered with ICMP too big) and, unless Config.MTU fixes
// it, the tunnel MTU (packets from the device larger than it are
// answered the same). It ends when the Network closes or the device
// closes its events.
func (n *Network) watchDevice() {
	defer n.wg.Done()
	events := n.dev.Events()
	for {
		var ev tun.Event
		var ok bool
		select {
		case <-n.ctx.Done():
			return
		case ev, ok = <-events:
			if !ok {
				return
			}
		}
		if ev&tun.EventMTUUpdate == 0 {
			continue
		}
		mtu, err := n.dev.MTU()
		if err != nil {
			if n.ctx.Err() == nil {
				n.log.Warn("vip: reading the device's MTU after it changed", "err", err)
			}
			continue
		}
		if old := int(n.devMTU.Load()); mtu != old {
			n.setMTU(mtu)
			n.log.Info("vip: device MTU changed", "from", old, "to", mtu, "tunnel_mtu", n.MTU())
		}
	}
}
