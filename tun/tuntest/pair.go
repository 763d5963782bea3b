// Package tuntest is the in-memory fake of a tun.Device for tests: Pair
// makes two devices joined back to back, so what a test writes into one
// the code under test reads from the other, in the same batches API and
// without root, TUN devices or a kernel in between.
//
// It owns the fake's rules: packets are copied on Write and Read (the
// caller's buffers are never kept), a packet larger than the MTU is
// refused (PacketTooBigError), a Write waits while the peer's queue is
// full rather than dropping (tests stay deterministic), packets to a
// closed peer are dropped, and Read after Close returns os.ErrClosed. It
// leaves out the offloads (no batches larger than the MTU, no coalescing)
// and every other kernel behaviour (checksums, routes, link state beyond
// the one EventUp).
package tuntest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gridlink/gridlink/tun"
)

// BatchSize is the fake's batch size, the Linux device's with offloads.
const BatchSize = 128

// queueLen is how many packets a device holds before Write waits.
const queueLen = 1024

// Device is one end of a Pair. It implements tun.Device.
type Device struct {
	name   string
	mtu    int
	in     chan []byte // what the peer wrote, for Read
	peer   *Device
	events chan tun.Event

	closeOnce sync.Once
	closed    chan struct{}
}

var _ tun.Device = (*Device)(nil)

// PacketTooBigError is Write's refusal of a packet longer than the MTU.
type PacketTooBigError struct {
	Len, MTU int
}

func (e *PacketTooBigError) Error() string {
	return fmt.Sprintf("tuntest: packet of %d bytes exceeds the MTU of %d", e.Len, e.MTU)
}

// Pair returns two devices, named tuntest0 and tuntest1, with the given
// MTU, joined back to back. Each has reported EventUp.
func Pair(mtu int) (a, b *Device) {
	a, b = newDevice("tuntest0", mtu), newDevice("tuntest1", mtu)
	a.peer, b.peer = b, a
	return a, b
}

func newDevice(name string, mtu int) *Device {
	d := &Device{
		name:   name,
		mtu:    mtu,
		in:     make(chan []byte, queueLen),
		events: make(chan tun.Event, 1),
		closed: make(chan struct{}),
	}
	d.events <- tun.EventUp
	return d
}

// Read waits for at least one packet and returns as many as are queued,
// up to len(bufs) and BatchSize.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if d.isClosed() {
		return 0, os.ErrClosed
	}
	var pkt []byte
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	case pkt = <-d.in:
	}
	n := 0
	for {
		if len(bufs[n]) < offset+len(pkt) {
			return n, fmt.Errorf("tuntest: buffer %d holds %d bytes past offset %d, packet has %d: %w",
				n, len(bufs[n])-offset, offset, len(pkt), io.ErrShortBuffer)
		}
		sizes[n] = copy(bufs[n][offset:], pkt)
		n++
		if n == len(bufs) || n == BatchSize {
			return n, nil
		}
		select {
		case pkt = <-d.in:
		default:
			return n, nil
		}
	}
}

// Write copies each packet bufs[i][offset:] to the peer's queue, waiting
// while it is full, and returns the bytes written. Packets longer than the
// MTU are refused and the rest written; packets to a closed peer vanish.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	var errs []error
	total := 0
	for _, b := range bufs {
		pkt := b[offset:]
		if len(pkt) > d.mtu {
			errs = append(errs, &PacketTooBigError{Len: len(pkt), MTU: d.mtu})
			continue
		}
		if d.isClosed() {
			return total, errors.Join(append(errs, os.ErrClosed)...)
		}
		select {
		case <-d.closed:
			return total, errors.Join(append(errs, os.ErrClosed)...)
		case <-d.peer.closed:
		case d.peer.in <- append([]byte(nil), pkt...):
		}
		total += len(pkt)
	}
	return total, errors.Join(errs...)
}

func (d *Device) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// BatchSize returns BatchSize.
func (d *Device) BatchSize() int { return BatchSize }

// MTU returns the MTU given to Pair.
func (d *Device) MTU() (int, error) { return d.mtu, nil }

// Name returns tuntest0 or tuntest1.
func (d *Device) Name() (string, error) { return d.name, nil }

// Events returns the device's events: one EventUp, closed by Close.
func (d *Device) Events() <-chan tun.Event { return d.events }

// Close unblocks Read and Write and closes Events; later calls do nothing.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		close(d.events)
	})
	return nil
}
