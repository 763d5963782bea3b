package tun

import (
	"errors"
	"fmt"

	wgtun "golang.zx2c4.com/wireguard/tun"
)

// Device is a TUN device read and written in batches of IP packets
// (without any header in front). golang.zx2c4.com/wireguard/tun's
// Device satisfies it, and so does tuntest's fake.
//
// Buffers: Read and Write take every packet at bufs[i][offset:]. With
// offloads on, Write puts a 10-byte virtio-net header in front of what it
// writes, so offset must be at least Offset; and it coalesces the packets
// of a flow into the buffer of the one that heads them (the first, or the
// one after a segment with PSH), up to that buffer's capacity: give every
// buffer MaxPacket bytes past Offset to have whole batches written, or
// wire-sized ones to have every packet written on its own. Write may
// change the bytes and lengths of bufs.
type Device interface {
	// Read reads one or more packets into bufs (len(sizes) >= len(bufs),
	// at most BatchSize used), sets their lengths in sizes and returns
	// how many it read. After Close it returns an error matching
	// os.ErrClosed.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes the packets bufs[i][offset:]. Its count is the
	// implementation's (bytes, with the headers the Linux device adds);
	// decide by the error, a join of the failed packets' errors.
	Write(bufs [][]byte, offset int) (int, error)
	// BatchSize is the most packets one Read or Write handles; it never
	// changes.
	BatchSize() int
	// MTU is the device's MTU.
	MTU() (int, error)
	// Name is the device's interface name.
	Name() (string, error)
	// Events delivers EventUp, EventDown and EventMTUUpdate for devices
	// that are monitored (Create's); Attach's never send. Close closes it.
	Events() <-chan Event
	// Close detaches from the device and unblocks Read.
	Close() error
}

// Event is a change of the device's state.
type Event = wgtun.Event

// The events a Device reports.
const (
	EventUp        Event = wgtun.EventUp
	EventDown      Event = wgtun.EventDown
	EventMTUUpdate Event = wgtun.EventMTUUpdate
)

// Offset is the headroom every buffer handed to Read and Write needs in
// front of its packet: room for the 10-byte virtio-net header Write puts
// there when offloads are on, rounded up.
const Offset = 16

// MaxPacket is the largest packet (a coalesced batch) Write may build in
// one buffer, and so the capacity a buffer needs past Offset for Write to
// coalesce into it; wire-sized buffers work, without coalescing.
const MaxPacket = 65535

// ErrUnsupported is returned by the constructors on platforms other than
// Linux.
var ErrUnsupported = errors.New("tun: TUN devices with offloads are supported on Linux only")

// NoDeviceError is Attach's refusal when no network device of that name
// exists (Attach never creates one, which would vanish again on Close).
type NoDeviceError struct {
	Name string
}

func (e *NoDeviceError) Error() string {
	return fmt.Sprintf("tun: no device %q in this network namespace (make it first, e.g. with ip tuntap add)", e.Name)
}
