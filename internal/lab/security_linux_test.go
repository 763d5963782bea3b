package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/status"
)

// outsider is one of pkitest's outsiders of the lab grid, as the command
// line presents it.
type outsider struct {
	pkitest.Outsider
	n      int
	args   []string // --ca, --crl, --key, --cert and the testing aid that presents a bad chain
	reason string   // the lab grid's verdict on its chain
	short  string   // its ID, short, as logs name it
}

// labOutsiders makes the seven outsiders against the lab CA and puts the
// revoked one's list in force; before the overlay starts, so that every
// hub and node reads that list.
func labOutsiders(t *testing.T) []outsider {
	c, err := lab.OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	crl, err := c.CRL()
	if err != nil {
		t.Fatal(err)
	}
	trust, err := pki.NewTrust(chain.Config{Roots: []*x509.Certificate{c.Authority.Cert}, CRLs: []*x509.RevocationList{crl}})
	if err != nil {
		t.Fatal(err)
	}
	g := &pkitest.Grid{CA: c.Authority, Trust: trust, CRL: crl}
	dir := t.TempDir()
	var outs []outsider
	for i, o := range g.Outsiders(t) {
		_, verr := g.Trust.VerifyCertificates(o.Chain)
		if !errors.Is(verr, o.Want) {
			t.Fatalf("the lab grid's verdict on %s: %v, want %v", o.Case, verr, o.Want)
		}
		f := pkitest.WriteCreds(t, dir, fmt.Sprintf("outsider%d", i+1), o.Creds.Key, o.Chain)
		outs = append(outs, outsider{Outsider: o, n: i + 1, reason: verr.Error(), short: o.Creds.Key.ID().Short(),
			args: append(f.Args(lab.CADir()), "--testing-unchecked-cert")})
	}
	if err := c.SetCRL(g.CRL); err != nil {
		t.Fatal(err)
	}
	return outs
}

// fileSize is where a log file ends now: later checks look past it.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logLine waits until the file at path, from byte off on, has a line
// containing every one of parts, and returns it.
func logLine(t *testing.T, what, path string, off int64, timeout time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if int64(len(b)) < off {
			off = 0
		}
		sc := bufio.NewScanner(bytes.NewReader(b[off:]))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line, all := sc.Text(), true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return line
			}
		}
		if time.Now().After(deadline) {
			if len(b) > int(off)+4000 {
				b = b[len(b)-4000:]
			} else {
				b = b[off:]
			}
			t.Errorf("%s: no line with %q in %s within %v; it ends:\n%s", what, parts, path, timeout, b)
			return ""
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exited waits for a one-shot command and returns its exit code.
func exited(t *testing.T, p *proc, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%v still runs after %v:\n%s", p.cmd.Args, timeout, p.output())
		return -1
	}
}

// In grid6 with the lab CA, an outsider of each of the seven kinds cannot
// attach to a hub, link a hub (dialling or dialled), nor reach a service,
// directly or routed; the outsider's error and the log of the hub or
// service that refused it name the same reason. Routed, the outsider goes
// through a hub that lets anyone attach (a grid hub's certificate, no CA
// of its own: a compromised hub): the service refuses it end to end. The
// seven run side by side, each in its own processes, in one lab
// (TestGrid6Overlay: the lab CA's revocation list named the revoked one
// before the overlay started).
func (g *grid6Overlay) outsiders(t *testing.T) {
	bin, tbin, topo, o, outs := g.bin, g.tbin, g.topo, g.o, g.outs
	// the outsiders run a testing build: a shipped one refuses the aid
	if out, err := exec.Command(bin, "hub", "--testing-unchecked-cert").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown flag: --testing-unchecked-cert") {
		t.Fatalf("%s accepts the testing aid: %v\n%s", bin, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	host := func(name string) *topology.Host { return labtest.Host(t, topo, name) }
	// the grid's das3v hub and node, a g5k node reached only routed; the
	// outsiders run on das3v-n2, the probe and the lax hub on das3d-n2.
	fe, direct, routed := host("das3v-fe"), host("das3v-n1"), host("g5k-n1")
	out, aux := host("das3v-n2"), host("das3d-n2")
	hubAddr := fmt.Sprintf("%s:%d", fe.PrimaryAddr(), matrix.HubPort)
	hubLog := matrix.LogFile(fe, "hub")
	for !o.Ping(ctx, direct, routed).OK {
		if ctx.Err() != nil {
			t.Fatalf("the overlay does not connect das3v-n1 to g5k-n1:\n%s", o.HubStatus(ctx, "das3v"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	t.Run("AttachHub", func(t *testing.T) {
		off := fileSize(hubLog)
		procs := make([]*proc, len(outs))
		for i, x := range outs {
			procs[i] = startIn(t, out, fmt.Sprintf("attach%d", x.n), append([]string{tbin, "node", "--name", fmt.Sprintf("attach-%d", x.n),
				"--hub", hubAddr, "--control", fmt.Sprintf("@attach-%d", x.n)}, x.args...)...)
		}
		for i, x := range outs {
			t.Run(caseName(x), func(t *testing.T) {
				if code := exited(t, procs[i], 30*time.Second); code == 0 {
					t.Errorf("the outsider's node exited 0:\n%s", procs[i].output())
				}
				if s := procs[i].output(); !strings.Contains(s, "not admitted by das3v") || !strings.Contains(s, x.reason) {
					t.Errorf("the outsider's error does not name the hub's reason %q:\n%s", x.reason, s)
				}
				logLine(t, "the hub's record", hubLog, off, 10*time.Second, x.short, "not admitted", x.reason)
			})
		}
	})

	t.Run("LinkHub", func(t *testing.T) {
		off := fileSize(hubLog)
		hubs := make([]*proc, len(outs))
		var peers []string
		for i, x := range outs {
			port := 7950 + x.n
			hubs[i] = startIn(t, out, fmt.Sprintf("outhub%d", x.n), append([]string{tbin, "hub", "--name", fmt.Sprintf("outhub-%d", x.n),
				"--listen", fmt.Sprintf("0.0.0.0:%d", port), "--control", fmt.Sprintf("@outhub-%d", x.n), "--peer", hubAddr}, x.args...)...)
			peers = append(peers, "--peer", fmt.Sprintf("%s:%d", out.PrimaryAddr(), port))
		}
		for _, p := range hubs {
			p.waitLog(t, "listening on", 20*time.Second)
		}
		// a grid hub that dials every outsider's hub
		probe, err := o.CA().Issue(ca.Hub, "probe")
		if err != nil {
			t.Fatal(err)
		}
		pr := startIn(t, aux, "probe", append(append([]string{bin, "hub", "--name", "probe", "--listen", "0.0.0.0:7948", "--control", "@probe"},
			peers...), probe.Args()...)...)
		for i, x := range outs {
			t.Run(caseName(x), func(t *testing.T) {
				// dialling: refused by das3v's hub
				logLine(t, "the outsider hub's record", hubs[i].log, 0, 15*time.Second, "peer "+hubAddr, "not admitted by das3v", x.reason)
				logLine(t, "das3v hub's record", hubLog, off, 10*time.Second, x.short, "not admitted", x.reason)
				// dialled: refused by the probe
				logLine(t, "the probe's record", pr.log, 0, 15*time.Second, fmt.Sprintf(":%d", 7950+x.n), x.short, "not admitted", x.reason)
				logLine(t, "the dialled outsider hub's record", hubs[i].log, 0, 10*time.Second, "connection from", "not admitted by probe", x.reason)
			})
		}
		// no grid hub linked to an outsider or routes through one
		for _, s := range topo.Sites {
			st, err := o.Run(ctx, matrix.HubHost(s), "status", "--hub", "--json")
			if err != nil {
				t.Errorf("status of %s's hub: %v", s.Name, err)
				continue
			}
			for _, x := range outs {
				if bytes.Contains(st, []byte(x.Creds.Key.ID().String())) || bytes.Contains(st, []byte(fmt.Sprintf("outhub-%d", x.n))) {
					t.Errorf("%s's hub knows outsider %d (%s):\n%s", s.Name, x.n, x.Case, st)
				}
			}
		}
		probeOut, err := o.Run(ctx, aux, "status", "--hub", "--control", "@probe", "--json")
		var probeSt status.Hub
		if err == nil {
			err = json.Unmarshal(probeOut, &probeSt)
		}
		if err != nil || slices.ContainsFunc(probeSt.Links, func(l status.Link) bool { return l.Role == "hub" }) {
			t.Errorf("the probe has a hub link: %v\n%s", err, probeOut)
		}
	})

	t.Run("Service", func(t *testing.T) { outsidersToServices(t, ctx, o, tbin, outs, out, aux, direct, routed) })
}

func caseName(x outsider) string {
	return fmt.Sprintf("%d_%s", x.n, strings.NewReplacer(" ", "_", "(", "", ")", "").Replace(x.Case))
}

// outsidersToServices: each outsider runs a node agent attached to a lax
// hub (a grid hub's certificate, no CA: it lets anyone attach, as a
// compromised hub would) and pings das3v-n1, which it reaches directly,
// and g5k-n1, which only routed connections reach: both services refuse
// it end to end, and say why in their logs.
func outsidersToServices(t *testing.T, ctx context.Context, o *matrix.Overlay, bin string, outs []outsider, out, aux, direct, routed *topology.Host) {
	laxCert, err := o.CA().Issue(ca.Hub, "lax")
	if err != nil {
		t.Fatal(err)
	}
	das3d := fmt.Sprintf("%s:%d", matrix.HubHost(aux.Site).PrimaryAddr(), matrix.HubPort)
	lax := startIn(t, aux, "lax", bin, "hub", "--name", "lax", "--listen", "0.0.0.0:7947", "--control", "@lax", "--peer", das3d,
		"--key", laxCert.Key, "--cert", laxCert.Cert, "--testing-unchecked-cert")
	lax.waitLog(t, "linked to", 20*time.Second)
	for {
		st, _ := o.Run(ctx, aux, "status", "--hub", "--control", "@lax", "--json")
		var laxSt status.Hub
		routes := map[string]bool{}
		if json.Unmarshal(st, &laxSt) == nil {
			for _, r := range laxSt.Routes {
				routes[r.Name] = r.Reachable
			}
		}
		if routes["g5k"] && routes["das3v"] {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the lax hub has no routes to das3v and g5k:\n%s\n%s", st, lax.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	laxAddr := fmt.Sprintf("%s:7947", aux.PrimaryAddr())
	for _, x := range outs {
		a := startIn(t, out, fmt.Sprintf("outsider%d", x.n), append([]string{bin, "node", "--verbose", "--name", fmt.Sprintf("outsider-%d", x.n),
			"--hub", laxAddr, "--control", fmt.Sprintf("@outsider-%d", x.n)}, x.args...)...)
		a.waitLog(t, "attached to hub lax", 20*time.Second)
	}

	// The outsider's view: `gridlink doctor` tries each method alone and
	// reads the target's verdict (to das3v-n1 the direct method is refused,
	// to g5k-n1 the routed one, the only one that reaches it), and `gridlink
	// ping` fails naming the reason, whichever method its race took (a
	// setup does not wait for the verdict: the first read meets it).
	targets := []struct {
		method string
		h      *topology.Host
		line   string // what the service logs on refusing that method
	}{
		{"direct", direct, "direct: refused"},
		{"routed", routed, "routed connection from"},
	}
	// until the lax hub finds the targets for its nodes
	for _, tg := range targets {
		for {
			d, _ := o.Run(ctx, out, "doctor", "--control", "@outsider-1", "--json", tg.h.ID())
			var diag status.Diagnosis
			if json.Unmarshal(d, &diag) == nil && diag.Target != nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the outsiders' nodes do not find %s through the lax hub:\n%s", tg.h.ID(), d)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	offs := make([]int64, len(targets))
	for j, tg := range targets {
		offs[j] = fileSize(matrix.LogFile(tg.h, "node"))
	}
	run := func(x outsider, h *topology.Host, cmd ...string) *proc {
		return startIn(t, out, fmt.Sprintf("%s%d-%s", cmd[0], x.n, h.ID()), append(append([]string{bin}, cmd...),
			"--control", fmt.Sprintf("@outsider-%d", x.n), "--json", h.ID())...)
	}
	type check struct{ doctor, ping *proc }
	checks := make([][]check, len(outs))
	for i, x := range outs {
		for _, tg := range targets {
			checks[i] = append(checks[i], check{run(x, tg.h, "doctor"), run(x, tg.h, "ping", "--dials", "1", "--count", "1")})
		}
	}
	for i, x := range outs {
		t.Run(caseName(x), func(t *testing.T) {
			for j, tg := range targets {
				c := checks[i][j]
				exited(t, c.doctor, 60*time.Second)
				var d status.Diagnosis
				if err := json.Unmarshal([]byte(c.doctor.output()), &d); err != nil {
					t.Errorf("doctor %s: %v\n%s", tg.h.ID(), err, c.doctor.output())
				}
				for _, m := range d.Methods {
					if m.OK {
						t.Errorf("doctor: the outsider reaches %s by %s", tg.h.ID(), m.Method)
					}
					if m.Method == tg.method && (!strings.Contains(m.Error, "not admitted by "+tg.h.ID()) || !strings.Contains(m.Error, x.reason)) {
						t.Errorf("doctor: %s to %s: %q; want a refusal saying %q", m.Method, tg.h.ID(), m.Error, x.reason)
					}
				}
				if code := exited(t, c.ping, 60*time.Second); code == 0 || !strings.Contains(c.ping.output(), "gridlink: ping "+tg.h.ID()+": ") ||
					!strings.Contains(c.ping.output(), "not admitted by "+tg.h.ID()) || !strings.Contains(c.ping.output(), x.reason) {
					t.Errorf("ping %s: exit %d; want a refusal saying %q:\n%s", tg.h.ID(), code, x.reason, c.ping.output())
				}
				logLine(t, tg.h.ID()+"'s record", matrix.LogFile(tg.h, "node"), offs[j], 10*time.Second, tg.line, x.short, "not admitted", x.reason)
			}
		})
	}
}
