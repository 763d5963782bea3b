//go:build linux

package wan

import (
	"fmt"
	"runtime"

	"github.com/gridlink/gridlink/tun"
	"golang.org/x/sys/unix"
)

// openTUN attaches to the existing TUN device dev in the network namespace
// at path netns ("" for the current one) through the product's tun
// package, with the offloads on unless offload is false. Only the attach
// happens inside the namespace: /dev/net/tun binds a file to the namespace
// it is opened in, so the returned device needs no thread of its own
// afterwards.
func openTUN(netns, dev string, offload bool) (tun.Device, error) {
	type result struct {
		d   tun.Device
		err error
	}
	ch := make(chan result, 1)
	go func() {
		if netns != "" {
			// Never unlocked: once setns has run, this thread belongs to
			// another namespace, and a goroutine that exits while locked
			// takes its thread with it instead of returning it to the pool.
			runtime.LockOSThread()
			if err := enterNetns(netns); err != nil {
				ch <- result{nil, err}
				return
			}
		}
		d, err := tun.Attach(dev, offload)
		ch <- result{d, err}
	}()
	r := <-ch
	return r.d, r.err
}

func enterNetns(netns string) error {
	ns, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open namespace: %w", err)
	}
	err = unix.Setns(ns, unix.CLONE_NEWNET)
	unix.Close(ns)
	if err != nil {
		return fmt.Errorf("enter namespace: %w", err)
	}
	return nil
}
