package lab_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
)

// gridlink vip exec across nat-hubs (issue 19, without root): the agent
// of an unprivileged account (made here with useradd) on east-n, behind
// east's NAT, started without --vip and certified by the lab CA; as that
// account, `gridlink vip exec` pings pub-n's virtual address (pub-n runs
// --vip as root, attached to another hub) and talks TCP to it by name.
// /dev/net/tun is mode 0600 on this host: the account's commands run with
// a 0666 node of the device bind-mounted over it (docs/vip.md, "Without
// root": what a site must allow).
func TestNATHubsVIPExec(t *testing.T) {
	bin := gridlinkBin(t)
	L := &natHubs{t: t, bin: bin, hubs: map[string]*proc{}}
	L.topo = labtest.Up(t, "nat-hubs", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const account = "gl-labexec"
	if _, err := user.Lookup(account); err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", account).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("userdel", account).Run() })
	}
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// the binary, the account's certificate and a usable device node where
	// the account reaches them
	dir, err := os.MkdirTemp("", "gl-labexec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	ubin := filepath.Join(dir, "gridlink")
	if out, err := exec.Command("cp", bin, ubin).CombinedOutput(); err != nil {
		t.Fatalf("copy gridlink: %v %s", err, out)
	}
	tunNode := filepath.Join(dir, "tun")
	must(unix.Mknod(tunNode, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))))
	must(os.Chmod(tunNode, 0o666))
	issued := L.issue(ca.Node, "east-u")
	for _, f := range []*string{&issued.CA, &issued.CRL, &issued.Key, &issued.Cert} {
		b, err := os.ReadFile(*f)
		must(err)
		nf := filepath.Join(dir, filepath.Base(*f))
		must(os.WriteFile(nf, b, 0o600))
		must(os.Chown(nf, uid, gid))
		*f = nf
	}
	asAccount := func(argv ...string) []string {
		script := `u="$1" g="$2"; shift 2; mount --bind "$0" /dev/net/tun && exec setpriv --reuid="$u" --regid="$g" --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp "$@"`
		return append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", script, tunNode, u.Uid, u.Gid}, argv...)
	}

	hub1, eastHub := L.host("pub-hub1"), L.host("east-hub")
	L.startHub(hub1, "pub1", L.issue(ca.Hub, "pub1"))
	L.startHub(eastHub, "east", L.issue(ca.Hub, "east"), hub1)
	pub := startVIPNode(t, bin, L.host("pub-n"), "pub-n", hubAddr(hub1), L.issue(ca.Node, "pub-n").Args()...)
	east := L.host("east-n")
	const ctl = "@gl-labexec"
	agent := startIn(t, east, "east-u", asAccount(ubin, "node", "--name", "east-u", "--verbose", "--hub", hubAddr(eastHub), "--control", ctl,
		"--ca", issued.CA, "--crl", issued.CRL, "--key", issued.Key, "--cert", issued.Cert)...)
	agent.waitLog(t, "attached to hub east", 60*time.Second)
	// east answers lookups from what it reaches: until its link to pub1
	// is up (its first dial may have come before pub1 listened), pub-n's
	// address is no node's there, and the ping's first packet would be
	// answered unreachable (a CI run failed so)
	testwait.Until(t, "east to reach pub1", 30*time.Second, func() bool { return L.reachable(eastHub, "pub1", identity.ID{}) })

	// a TCP echo on pub-n's virtual address
	var ln net.Listener
	if err := netns.Do(lab.HostNS(pub.h), func() (err error) { ln, err = net.Listen("tcp", netip.AddrPortFrom(pub.v4, 7001).String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		from <- c.RemoteAddr()
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		c.Write(buf[:n])
	}()

	script := fmt.Sprintf(`set -e
ping -n -c 3 -i 0.3 -w 30 %[1]s
exec 3<>/dev/tcp/%[1]s/7001; echo hello-across-nat >&3; read -r got <&3; echo "echoed: $got"
getent ahostsv4 pub-n.grid | head -1
`, pub.v4)
	out, errb, err := tryIn(ctx, east, nil, asAccount(ubin, "vip", "exec", "--control", ctl, "--", "bash", "-c", script)...)
	if err != nil {
		t.Fatalf("vip exec on east-n as %s: %v\n%s\n%s\nagent:\n%s", account, err, out, errb, agent.output())
	}
	for _, want := range []string{"3 received", "echoed: hello-across-nat", pub.v4.String() + " "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("vip exec's output lacks %q:\n%s", want, out)
		}
	}
	select {
	case a := <-from:
		ap := a.(*net.TCPAddr).AddrPort()
		if !netip.MustParsePrefix("100.96.0.0/12").Contains(ap.Addr().Unmap()) {
			t.Errorf("pub-n's echo saw %s, want east-u's virtual address", a)
		}
		t.Logf("pub-n's echo saw east-u's exec from %s", a)
	default:
		t.Error("pub-n's echo saw no connection")
	}
	t.Logf("vip exec on east-n as uid %d:\n%s", uid, out)
}
