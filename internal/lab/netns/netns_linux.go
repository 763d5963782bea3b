// Package netns runs code inside the lab's named network namespaces
// (/run/netns/NAME, as made by `ip netns add`). It owns entering and leaving
// a namespace safely from Go; creating, configuring and removing namespaces
// is package lab's.
//
// A goroutine enters a namespace on a locked OS thread. Sockets created
// there stay in that namespace for their whole life, whichever thread later
// uses them, so Do can hand them back to ordinary code. Code run by Do
// keeps the root namespace's /etc (not the lab's /etc/netns/NS files,
// which only `ip netns exec` mounts): a name looked up there asks the
// machine's name servers, out of the namespace's reach; use addresses.
package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where `ip netns` keeps named namespaces.
const Dir = "/run/netns"

// Path returns the file of the named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Exists reports whether the named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(Path(name))
	return err == nil
}

// List returns the names of existing namespaces that start with prefix.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// Do runs fn on an OS thread that has entered the named namespace. If the
// thread cannot be returned to its original namespace it is discarded, so no
// other goroutine ever runs in the lab by accident.
func Do(name string, fn func() error) error {
	target, err := unix.Open(Path(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer unix.Close(target)

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns: open own namespace: %w", err)
			return // the locked thread exits with the goroutine
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns %s: enter: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread dies with this goroutine.
			errc <- fmt.Errorf("netns %s: leave: %w (thread discarded)", name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// WriteSysctl sets /proc/sys keys (dotted names, e.g. net.ipv4.ip_forward)
// inside the named namespace.
func WriteSysctl(name string, kv map[string]string) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return Do(name, func() error {
		for _, k := range keys {
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(kv[k]), 0o644); err != nil {
				return fmt.Errorf("netns %s: sysctl %s=%s: %w", name, k, kv[k], err)
			}
		}
		return nil
	})
}
