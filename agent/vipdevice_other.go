//go:build !linux

package agent

import (
	"net"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

const vipClaimBound = 2 * time.Minute

func (a *Agent) runDevice(c net.Conn, h VIPHost, setup control.VIPSetup, pid int) {
	a.vip.release()
	_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: "only Linux agents take devices", Kind: control.KindNotAllowed}))
	c.Close()
}
