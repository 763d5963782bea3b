package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// attachLab is the bring-up of sshsite for the attachment cases of issue
// 17: the gridlink binary run whole in lab hosts, with the lab CA.
type attachLab struct {
	t    *testing.T
	topo *topology.Topology
	bin  string
}

func (L *attachLab) host(name string) *topology.Host { return labtest.Host(L.t, L.topo, name) }

// issue gives a hub or node called name a fresh key and a certificate of
// the lab CA for it: the flags --ca --crl --key --cert.
func (L *attachLab) issue(role ca.Role, name string) []string {
	c, err := lab.OpenCA()
	if err != nil {
		L.t.Fatal(err)
	}
	i, err := c.Issue(role, name)
	if err != nil {
		L.t.Fatal(err)
	}
	return i.Args()
}

// start runs gridlink with args in h, certified as role name.
func (L *attachLab) start(h *topology.Host, role ca.Role, name string, args ...string) *proc {
	argv := append([]string{L.bin, string(role), "--name", name}, args...)
	return startIn(L.t, h, name, append(argv, L.issue(role, name)...)...)
}

// gridlink runs a gridlink command in h: its standard output, how long it
// took, and an error with its standard error if it failed.
func (L *attachLab) gridlink(h *topology.Host, args ...string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	out, errb, err := tryIn(ctx, h, nil, append([]string{L.bin}, args...)...)
	d := time.Since(t0)
	if err != nil {
		return string(out), d, fmt.Errorf("gridlink %s on %s: %v: %s", strings.Join(args, " "), h.ID(), err, strings.TrimSpace(string(errb)))
	}
	return string(out), d, nil
}

// status is the agent's status in h, or an error while none answers.
func (L *attachLab) status(h *topology.Host) (status.Agent, error) {
	var st status.Agent
	out, _, err := L.gridlink(h, "status", "--json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &st)
	}
	return st, err
}

// ping pings node from h once (one connection, one round trip).
func (L *attachLab) ping(h *topology.Host, node string, extra ...string) (status.Ping, time.Duration) {
	out, d, err := L.gridlink(h, append([]string{"ping", "--json", "--dials", "1", "--count", "1", node}, extra...)...)
	var p status.Ping
	if jerr := json.Unmarshal([]byte(out), &p); jerr != nil {
		L.t.Fatalf("ping %s from %s: %v (%v): %s", node, h.ID(), err, jerr, out)
	}
	return p, d
}

// waitFor waits, at most d, until ok holds (testwait.Until on L's test).
func (L *attachLab) waitFor(what string, d time.Duration, ok func() bool) {
	L.t.Helper()
	testwait.Until(L.t, what, d, ok)
}

// waitAttached waits until the agent in h is attached to hub.
func (L *attachLab) waitAttached(h *topology.Host, hub string) status.Agent {
	L.t.Helper()
	var st status.Agent
	L.waitFor(h.ID()+"'s node to attach to hub "+hub, 30*time.Second, func() bool {
		var err error
		st, err = L.status(h)
		return err == nil && st.Node.HubName == hub && st.Attach == ""
	})
	return st
}

// The attachment cases of issue 17 on sshsite, each run whole with the
// gridlink binary: a node of an ssh-only site attaches to its hub through
// the frontend's sshd (SSHHub); a node started before its hub runs its
// agent at once, says it is attaching and why, attaches when the hub
// starts, and fails at once, naming why, once the hub is gone (BeforeHub);
// a node restarted with a fresh key under its certified name is reached
// on the first try by a node that had its old identity cached (FreshKey).
func TestSSHSiteAttach(t *testing.T) {
	L := &attachLab{t: t, bin: gridlinkBin(t)}
	L.topo = labtest.Up(t, "sshsite", nil)
	sfe, sn1 := L.host("sshonly-fe"), L.host("sshonly-n1")
	cfe, cn1 := L.host("campus-fe"), L.host("campus-n1")

	// sshonly's hub listens on its loopback only; the frontend's firewall
	// lets only ssh in from its networks, as the site's does from outside.
	fw := exec.Command("ip", "netns", "exec", lab.HostNS(sfe), "nft", "-f", "-")
	fw.Stdin = strings.NewReader(`table inet attachfw {
	chain in {
		type filter hook input priority 0; policy accept;
		iifname "lo" accept
		ct state established,related accept
		tcp dport 22 accept
		drop
	}
}
`)
	if out, err := fw.CombinedOutput(); err != nil {
		t.Fatalf("firewall on sshonly-fe: %v\n%s", err, out)
	}
	sshFlags := []string{"--identity", lab.SSHClientKey(), "--known-hosts", lab.SSHKnownHosts()}
	L.start(sfe, ca.Hub, "sshonly", "--listen", "127.0.0.1:7946")
	campusHub := fmt.Sprintf("%s:7946", cfe.PrimaryAddr())
	L.start(cfe, ca.Hub, "campus", append([]string{"--listen", "0.0.0.0:7946",
		"--peer", fmt.Sprintf("ssh://root@%s/127.0.0.1:7946", sfe.Site.WAN)}, sshFlags...)...)
	L.start(cn1, ca.Node, "campus-n1", "--verbose", "--hub", campusHub)
	L.waitAttached(cn1, "campus")

	t.Run("SSHHub", func(t *testing.T) {
		L := *L
		L.t = t
		lanFE := sfe.Ifaces[len(sfe.Ifaces)-1].Addr // fe's address on the lan
		// nothing but ssh reaches the frontend from the node's network
		if c, err := labtest.Dial(sn1, fmt.Sprintf("%s:7946", lanFE), "", time.Second); err == nil {
			c.Close()
			t.Fatalf("sshonly-n1 reaches %s:7946 without ssh", lanFE)
		}
		spec := fmt.Sprintf("ssh://root@%s/127.0.0.1:7946", lanFE)
		n := L.start(sn1, ca.Node, "sshonly-n1", append([]string{"--verbose", "--hub", spec}, sshFlags...)...)
		L.waitFor("sshonly-n1's node to attach through ssh", 30*time.Second, func() bool {
			if n.cmd.ProcessState != nil || strings.Contains(n.output(), "unknown flag") {
				t.Fatalf("gridlink node --hub %s exited:\n%s", spec, n.output())
			}
			st, err := L.status(sn1)
			return err == nil && st.Node.HubName == "sshonly" && st.Attach == ""
		})
		// through both hubs, linked over the site's ssh too
		for _, c := range []struct {
			from *topology.Host
			to   string
		}{{sn1, "campus-n1"}, {cn1, "sshonly-n1"}} {
			var p status.Ping
			L.waitFor(c.from.ID()+" to reach "+c.to, 30*time.Second, func() bool {
				p, _ = L.ping(c.from, c.to, "--fresh")
				return p.Error == ""
			})
			t.Logf("%s -> %s: %s", c.from.ID(), c.to, p.Method)
		}
	})

	t.Run("BeforeHub", func(t *testing.T) {
		L := *L
		L.t = t
		cn2, cn3 := L.host("campus-n2"), L.host("campus-n3")
		late := fmt.Sprintf("%s:7947", cfe.PrimaryAddr())
		n := L.start(cn2, ca.Node, "campus-n2", "--hub", late)
		// the agent answers at once, attaching and saying why
		var st status.Agent
		L.waitFor("campus-n2's agent to answer while its hub is down", 10*time.Second, func() bool {
			if n.cmd.ProcessState != nil {
				t.Fatalf("the node exited while its hub is down:\n%s", n.output())
			}
			var err error
			st, err = L.status(cn2)
			return err == nil && strings.Contains(st.Attach, "refused")
		})
		if !strings.HasPrefix(st.Attach, "attaching to "+late+": ") || !strings.Contains(st.Attach, ", retrying") {
			t.Errorf("status while the hub is down: %q; want \"attaching to %s: <reason>, retrying\"", st.Attach, late)
		}
		text, _, err := L.gridlink(cn2, "status")
		if err != nil || !strings.Contains(text, "hub: attaching to "+late) {
			t.Errorf("gridlink status while the hub is down (%v):\n%s", err, text)
		}
		n.waitLog(t, "attaching to "+late, 5*time.Second)
		// the hub starts later: the node attaches
		hub := L.start(cfe, ca.Hub, "late", "--listen", "0.0.0.0:7947", "--control", "@gridlink-hub-late")
		L.waitAttached(cn2, "late")
		L.start(cn3, ca.Node, "campus-n3", "--hub", late)
		L.waitAttached(cn3, "late")
		if p, _ := L.ping(cn2, "campus-n3"); p.Error != "" {
			t.Fatalf("campus-n2 -> campus-n3 through the late hub: %s", p.Error)
		}
		n.waitLog(t, "attached to hub late", 5*time.Second)

		// the hub dies: what needs it fails at once, saying why
		_ = syscall.Kill(-hub.cmd.Process.Pid, syscall.SIGKILL)
		L.waitFor("campus-n2 to notice", 10*time.Second, func() bool {
			st, err := L.status(cn2)
			return err == nil && st.Attach != ""
		})
		// a direct connection to an address it knows needs no hub
		if p, _ := L.ping(cn2, "campus-n3"); p.Error != "" || p.Method != "direct" {
			t.Errorf("campus-n2 -> campus-n3 (known) without a hub: method %q, error %q; want direct", p.Method, p.Error)
		}
		// what needs a hub (the name looked up afresh) fails at once
		p, d := L.ping(cn2, "campus-n3", "--fresh")
		t.Logf("ping without a hub: %v: %s", d.Round(time.Millisecond), p.Error)
		if !strings.Contains(p.Error, "not attached to any hub since ") {
			t.Errorf("ping without a hub: %q; want \"not attached to any hub since T: <reason>\"", p.Error)
		}
		if d > time.Second {
			t.Errorf("ping without a hub took %v; want a failure within 1 s", d)
		}
		if st, err := L.status(cn2); err != nil || !strings.HasPrefix(st.Attach, "attaching to "+late+": ") {
			t.Errorf("status after the hub died (%v): %q", err, st.Attach)
		}
		if n.cmd.ProcessState != nil {
			t.Errorf("the node exited after its hub died:\n%s", n.output())
		}
	})

	t.Run("FreshKey", func(t *testing.T) {
		L := *L
		L.t = t
		cn3 := L.host("campus-n3")
		attached := func() status.Agent {
			var st status.Agent
			L.waitFor("fresh-n3 to attach", 30*time.Second, func() bool {
				out, _, err := L.gridlink(cn3, "status", "--json", "--control", "@fresh-n3")
				return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Node.HubName == "campus" && st.Attach == ""
			})
			return st
		}
		old := L.start(cn3, ca.Node, "fresh-n3", "--control", "@fresh-n3", "--hub", campusHub)
		oldID := attached().Node.ID
		if p, _ := L.ping(cn1, "fresh-n3"); p.Error != "" {
			t.Fatalf("campus-n1 -> fresh-n3: %s", p.Error)
		}
		// restarted with a fresh key (and its certificate for the name)
		old.stop()
		L.start(cn3, ca.Node, "fresh-n3", "--control", "@fresh-n3", "--hub", campusHub)
		newID := attached().Node.ID
		if newID == oldID {
			t.Fatalf("fresh-n3 restarted with its old key %s", oldID.Short())
		}
		// the first dial, with the old identity in campus-n1's cache
		p, _ := L.ping(cn1, "fresh-n3")
		if p.Error != "" {
			t.Fatalf("campus-n1 -> fresh-n3 after its restart with a fresh key, first try: %s", p.Error)
		}
		t.Logf("after the restart with a fresh key (%s, was %s): reached by %s on the first try", newID.Short(), oldID.Short(), p.Method)
	})
}
