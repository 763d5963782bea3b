package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/tun"
)

// The virtual network on a handed device (control/vip.go; gridlink vip
// exec): the agent takes a TUN device made by a process of its uid in a
// namespace of its own, checks it is one (tun.FromFile) and lets the
// service above it (VIPHost: the API, which the agent cannot import) run
// the node's virtual network on it until that process closes the control
// connection. One device at a time: a second request while one runs is
// refused (KindBusy) naming the process that holds it.

// VIPHost runs the node's virtual network on handed devices.
type VIPHost interface {
	// Setup claims the node's addresses and says what the device must
	// hold; names asks for the names to be served on handed sockets. A
	// *control.StreamError says why not in the protocol's kinds.
	Setup(ctx context.Context, names bool) (control.VIPSetup, error)
	// Run runs the virtual network on dev (and, if names is not nil, the
	// names on its sockets) until stop, which closes them all.
	Run(dev tun.Device, names *NameSockets) (stop func() error, err error)
}

// NameSockets are the sockets a handed device's names are served on,
// bound in its namespace.
type NameSockets struct {
	UDP net.PacketConn
	TCP net.Listener
}

// vipDevices is the agent's one handed device at a time.
type vipDevices struct {
	mu     sync.Mutex
	host   VIPHost
	holder int // pid of the process whose device is in use; 0: none
	ns     int // pid of the process in its namespace, once known
}

func (v *vipDevices) setNamespace(pid int) {
	v.mu.Lock()
	v.ns = pid
	v.mu.Unlock()
}

// SetVIPHost makes the agent take devices (POST /vip/device) for h; nil
// stops taking new ones.
func (a *Agent) SetVIPHost(h VIPHost) {
	a.vip.mu.Lock()
	a.vip.host = h
	a.vip.mu.Unlock()
}

// BusyError is a second device refused while one is in use.
type BusyError struct {
	Holder    int // the pid that handed the device in use (gridlink vip exec)
	Namespace int // the pid of its namespace's process; 0 while not known
}

func (e *BusyError) Error() string {
	s := fmt.Sprintf("the virtual network runs on the device of pid %d (gridlink vip exec) already; one device at a time: ", e.Holder)
	if e.Namespace == 0 {
		return s + "run the program after it ends"
	}
	return s + fmt.Sprintf("run the program in its namespace (nsenter --preserve-credentials -U -n -m -t %d CMD) or after it ends", e.Namespace)
}

// ErrNoVIPHost: the agent takes no devices (no API above it set one).
var ErrNoVIPHost = errors.New("this agent runs no virtual network on handed devices")

// take reserves the device slot for pid.
func (v *vipDevices) take(pid int) (VIPHost, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.host == nil:
		return nil, ErrNoVIPHost
	case v.holder != 0:
		return nil, &BusyError{Holder: v.holder, Namespace: v.ns}
	}
	if pid == 0 {
		pid = -1 // unknown, still held
	}
	v.holder = pid
	return v.host, nil
}

func (v *vipDevices) release() {
	v.mu.Lock()
	v.holder, v.ns = 0, 0
	v.mu.Unlock()
}

// vipDevice serves POST /vip/device.
func (a *Agent) vipDevice(w http.ResponseWriter, r *http.Request) {
	var req control.VIPRequest
	if !decode(w, r, "vip device", &req) {
		return
	}
	p, _ := r.Context().Value(peerKey{}).(peerCreds)
	h, err := a.vip.take(p.pid)
	if err != nil {
		kind, status := control.KindNotAllowed, http.StatusForbidden
		if _, ok := errors.AsType[*BusyError](err); ok {
			kind, status = control.KindBusy, http.StatusConflict
		}
		a.refused("virtual network device of pid %d refused: %v", p.pid, err)
		streamFail(w, status, kind, err)
		return
	}
	held := true
	defer func() {
		if held {
			a.vip.release()
		}
	}()
	ctx, cancel := context.WithTimeout(r.Context(), 2*vipClaimBound)
	setup, err := h.Setup(ctx, req.Names)
	cancel()
	if err != nil {
		kind := control.KindFailed
		if se, ok := errors.AsType[*control.StreamError](err); ok {
			kind = se.Kind
		}
		a.logf("agent: virtual network device of pid %d: %v", p.pid, err)
		streamFail(w, http.StatusServiceUnavailable, kind, err)
		return
	}
	js, _ := json.Marshal(setup)
	c, err := upgrade(w, control.VIPSetupHeader+": "+string(js)+"\r\n")
	if err != nil {
		return
	}
	held = false
	go a.runDevice(c, h, setup, p.pid)
}
