package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// The virtual network on a handed device (gridlink vip exec): a process
// of the agent's uid that made a TUN device in a network namespace of its
// own (which needs no root where the kernel allows user namespaces) hands
// it to the agent, which runs the node's virtual network on it while the
// control connection stays open.
//
//	POST /vip/device VIPRequest
//	    → an HTTP error (a JSON StreamError) when the agent cannot:
//	      KindBusy (another process's device is in use, or the node's
//	      virtual network runs on the host's device), KindNotAllowed (no
//	      hub), KindFailed (its addresses could not be claimed)
//	    → 101 with "Gridlink-VIP: " and the VIPSetup in JSON: what the
//	      device must hold (the node's addresses, claimed from the hubs,
//	      the MTU, where the names are served); the agent then waits
//	      (nothing else comes with the answer, so descriptors can follow)
//	client → 'F', the pid of the namespace's process in decimal (at most
//	      MaxVIPMessage bytes in all; it names the namespace to a second
//	      exec that the agent refuses), with SCM_RIGHTS: the TUN device's
//	      descriptor, then, if
//	      the client serves names, a UDP socket and a listening TCP socket
//	      bound to VIPSetup.NameServer in the namespace
//	agent → {"ready":true} once the network runs on the device, or
//	      {"error":...,"kind":...} (KindBadRequest: not a TUN device, or
//	      sockets of the wrong kind) and it closes.
//
// From "ready" until the client closes the connection or half-closes it
// (or sends anything) the device is the node's; then the agent stops the
// virtual network on it, closes its descriptors, and, once the next device
// may come, sends {"done":true} and closes (the node keeps its addresses'
// claims, so the next device gets the same addresses).
const (
	// VIPDevicePath is the request's path.
	VIPDevicePath = "/vip/device"
	// VIPSetupHeader carries the VIPSetup in the 101 answer.
	VIPSetupHeader = "Gridlink-VIP"
	// MaxVIPFDs is the most descriptors the handoff carries.
	MaxVIPFDs = 3
	// MaxVIPMessage is the most bytes of the handoff's message.
	MaxVIPMessage = 16
)

// KindBusy: the agent's virtual network runs already (on another
// process's device, or on the host's).
const KindBusy = "busy"

// VIPRequest is the body of POST /vip/device.
type VIPRequest struct {
	// Names asks for the names to be served on sockets the client hands
	// over with the device.
	Names bool `json:"names,omitempty"`
}

// VIPSetup is what the handed device must hold.
type VIPSetup struct {
	// Addrs are the node's virtual addresses with the virtual network's
	// prefix lengths (100.97.3.4/12, fd67:726c::1:2/32): each goes on the
	// device, its prefix is routed through it.
	Addrs []string `json:"addrs"`
	MTU   int      `json:"mtu"`
	// NameServer is the address (IP:PORT) in the namespace where the
	// client binds the name sockets; empty: no names.
	NameServer string `json:"name_server,omitempty"`
	// Zone is the names' zone ("grid").
	Zone string `json:"zone,omitempty"`
}

// VIPDevice is a granted /vip/device request: the setup the agent sent,
// waiting for the device (Hand).
type VIPDevice struct {
	conn  net.Conn
	Setup VIPSetup
}

// VIPDevice asks the agent to run the node's virtual network on a device
// this process will hand it.
func (c *Client) VIPDevice(ctx context.Context, req VIPRequest) (*VIPDevice, error) {
	conn, h, err := c.stream(ctx, VIPDevicePath, req)
	if err != nil {
		return nil, err
	}
	var setup VIPSetup
	if err := json.Unmarshal([]byte(h.Get(VIPSetupHeader)), &setup); err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: /vip/device: no setup in the answer: %w", err)
	}
	return &VIPDevice{conn: conn, Setup: setup}, nil
}

// Hand gives the agent the device (and the name sockets) made by the
// namespace's process pid and waits until the network runs on it. The
// caller may close its descriptors afterwards.
func (d *VIPDevice) Hand(pid int, files ...*os.File) error {
	uc, ok := d.conn.(*net.UnixConn)
	if !ok {
		return errors.New("agent: /vip/device: the agent's answer came with bytes after it")
	}
	if len(files) == 0 || len(files) > MaxVIPFDs {
		return fmt.Errorf("agent: /vip/device: %d descriptors, want 1 to %d", len(files), MaxVIPFDs)
	}
	if err := sendFiles(uc, append([]byte{ModeFDs}, strconv.Itoa(pid)...), files); err != nil {
		return fmt.Errorf("agent: /vip/device: hand the device: %w", err)
	}
	ev, err := ReadEvent(d.conn)
	switch {
	case err != nil:
		return fmt.Errorf("agent: /vip/device: %w", err)
	case ev.Error != "":
		return &StreamError{Kind: orElse(ev.Kind, KindFailed), Msg: "agent: " + ev.Error}
	case !ev.Ready:
		return errors.New("agent: /vip/device: no ready in the answer")
	}
	return nil
}

// vipDoneWait bounds Close's wait for the agent's word.
const vipDoneWait = 10 * time.Second

// Close gives the device back: the agent stops the virtual network on it
// and, once its slot is free for the next device, says so ({"done":true}),
// which Close waits for (vipDoneWait at most).
func (d *VIPDevice) Close() error {
	defer d.conn.Close()
	cw, ok := d.conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return nil
	}
	_ = d.conn.SetReadDeadline(time.Now().Add(vipDoneWait))
	for {
		ev, err := ReadEvent(d.conn)
		if err != nil || ev.Done || ev.Error != "" {
			return nil
		}
	}
}
