package gridlink

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// What gridlink vip exec says a kernel lacks: each setting that forbids
// it is named with the change a site must make, and errors.Is finds the
// system's reason; root needs none of it.
func TestCheckVIPExecNamesWhatIsMissing(t *testing.T) {
	ok := map[string]string{sysMaxUserNS: "15000", sysUnprivUserNS: "1", sysAppArmorUserNS: "0"}
	with := func(path, v string) func(string) string {
		return func(p string) string {
			if p == path {
				return v
			}
			return ok[p]
		}
	}
	tunOK := "/dev/null" // any file the test can read and write
	cases := []struct {
		what   string
		sysctl func(string) string
		tun    string
		want   string
		errno  syscall.Errno
	}{
		{"user namespaces off", with(sysMaxUserNS, "0"), tunOK, "user.max_user_namespaces is 0", syscall.ENOSPC},
		{"Debian's switch off", with(sysUnprivUserNS, "0"), tunOK, "kernel.unprivileged_userns_clone is 0", syscall.EPERM},
		{"AppArmor's restriction", with(sysAppArmorUserNS, "1"), tunOK, "kernel.apparmor_restrict_unprivileged_userns=1", syscall.EPERM},
		{"no TUN device", with("", ""), filepath.Join(t.TempDir(), "tun"), "a site must load the tun module", syscall.ENOENT},
	}
	for _, c := range cases {
		err := nsSettings(1000, c.sysctl)
		if err == nil {
			err = tunAccess(1000, c.tun)
		}
		var ne *VIPNamespaceError
		if !errors.As(err, &ne) || !strings.Contains(ne.Missing, c.want) || !errors.Is(err, c.errno) {
			t.Errorf("%s: %v, want a VIPNamespaceError naming %q (%v)", c.what, err, c.want, c.errno)
		}
	}
	// a kernel without the distribution switches (no such files) is fine
	if err := nsSettings(1000, with("", "")); err != nil {
		t.Errorf("all allowed: %v", err)
	}
	if err := tunAccess(1000, tunOK); err != nil {
		t.Errorf("a usable device: %v", err)
	}
	if nsSettings(0, with(sysMaxUserNS, "0")) != nil || tunAccess(0, "/nonexistent") != nil {
		t.Error("root is refused")
	}
}
