package portmap_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/portmap"
)

// The lab tests run portmap in a helper process wholly inside a lab host
// (the test binary again, under ip netns exec): a Mapping's goroutines
// would not stay in a namespace that one thread entered.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	labtest.Main(m)
}

// helper is a helper process serving a port on a lab host and holding a
// mapping of it.
type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan helperReply
	stderr *strings.Builder
}

func startHelper(t *testing.T, h *topology.Host, a helperArgs) (*helper, helperReply) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(a)
	cmd := exec.Command("ip", "netns", "exec", lab.HostNS(h), exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
	hp := &helper{t: t, cmd: cmd, out: make(chan helperReply, 4), stderr: &strings.Builder{}}
	cmd.Stderr = hp.stderr
	if hp.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() && hp.stderr.Len() > 0 {
			t.Logf("helper on %s said:\n%s", h.ID(), hp.stderr)
		}
	})
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var r helperReply
			if err := dec.Decode(&r); err != nil {
				close(hp.out)
				return
			}
			hp.out <- r
		}
	}()
	return hp, hp.reply()
}

// reply waits for the helper's next report.
func (hp *helper) reply() helperReply {
	hp.t.Helper()
	select {
	case r, ok := <-hp.out:
		if !ok {
			hp.t.Fatalf("helper exited: %v\n%s", hp.cmd.Wait(), hp.stderr)
		}
		return r
	case <-time.After(30 * time.Second):
		hp.t.Fatalf("helper silent for 30s\n%s", hp.stderr)
	}
	panic("unreachable")
}

// ask sends a command ("status", "close") and returns the answer.
func (hp *helper) ask(cmd string) helperReply {
	hp.t.Helper()
	if _, err := io.WriteString(hp.in, cmd+"\n"); err != nil {
		hp.t.Fatal(err)
	}
	return hp.reply()
}

// exchange connects from host from to addr and checks the helper's
// greeting and echo: bytes both ways through the mapping.
func exchange(from *topology.Host, addr netip.AddrPort, greet string) error {
	c, err := labtest.Dial(from, addr.String(), "", 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || line != greet+"\n" {
		return fmt.Errorf("greeting %q, %v; want %q", line, err, greet)
	}
	msg := fmt.Sprintf("ping from %s\n", from.ID())
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != msg {
		return fmt.Errorf("echo %q, %v; want %q", echo, err, msg)
	}
	return nil
}

func TestLabPortMap(t *testing.T) {
	topo := labtest.Up(t, "nat-zoo", nil)
	igd := labtest.Host(t, topo, "igd-h")
	server := labtest.Host(t, topo, "public-server")
	wan := igd.Site.WAN
	local := igd.Ifaces[0].Addr

	// map, reach from the internet, unmap, and no longer reach.
	for i, protos := range [][]portmap.Protocol{{portmap.NATPMP}, {portmap.UPnP}, nil} {
		name := "both"
		if protos != nil {
			name = string(protos[0])
		}
		t.Run(name, func(t *testing.T) {
			port := uint16(7001 + i)
			hp, r := startHelper(t, igd, helperArgs{Protocols: protos, Port: port, Greet: "igd-h"})
			if r.Err != "" {
				t.Fatalf("Map: %s", r.Err)
			}
			st := r.Status
			t.Logf("%s (in %v)", st.Text, r.Elapsed)
			if protos != nil && st.Protocol != protos[0] {
				t.Errorf("protocol %s, want %s", st.Protocol, protos[0])
			}
			if st.External.Addr() != wan || st.Internal != netip.AddrPortFrom(local, port) || st.Lifetime <= 0 {
				t.Errorf("mapping %s -> %s for %v; want %s:PORT -> %s:%d", st.External, st.Internal, st.Lifetime, wan, local, port)
			}
			if !strings.Contains(st.Gateway, igd.Ifaces[0].Net.Gateway.String()) {
				t.Errorf("gateway %q, want the site gateway %s", st.Gateway, igd.Ifaces[0].Net.Gateway)
			}
			if err := exchange(server, st.External, "igd-h"); err != nil {
				t.Fatalf("public-server -> %s (mapped to igd-h): %v", st.External, err)
			}
			if c := hp.ask("close"); c.Err != "" || !c.Closed {
				t.Fatalf("Close: %+v", c)
			}
			if err := exchange(server, st.External, "igd-h"); err == nil {
				t.Errorf("public-server still reaches igd-h at %s after Close", st.External)
			} else {
				t.Logf("after Close: %v", err)
			}
			// the listener still serves inside the site.
			if err := exchange(labtest.Host(t, topo, "igd-h"), netip.AddrPortFrom(local, port), "igd-h"); err != nil {
				t.Errorf("igd-h's own listener: %v", err)
			}
		})
	}
}

// Mappings with a short lease stay up past it, renewed, while a lease
// that nobody renews runs out at the same gateway.
func TestLabPortMapRenewal(t *testing.T) {
	topo := labtest.Up(t, "nat-zoo", nil)
	igd := labtest.Host(t, topo, "igd-h")
	server := labtest.Host(t, topo, "public-server")
	const life = 4 * time.Second
	_, raw := startHelper(t, igd, helperArgs{RawNATPMP: true, Gateway: igd.Ifaces[0].Net.Gateway, Port: 7010, Lifetime: life, Greet: "raw"})
	if raw.Err != "" || raw.Status.Lifetime != life {
		t.Fatalf("unrenewed NAT-PMP mapping: %+v; want a lease of %v", raw, life)
	}
	if err := exchange(server, raw.Status.External, "raw"); err != nil {
		t.Fatalf("unrenewed mapping at first: %v", err)
	}
	helpers := map[portmap.Protocol]*helper{}
	for i, p := range []portmap.Protocol{portmap.NATPMP, portmap.UPnP} {
		hp, r := startHelper(t, igd, helperArgs{Protocols: []portmap.Protocol{p}, Port: uint16(7011 + i), Lifetime: life, Greet: string(p)})
		if r.Err != "" || r.Status.Lifetime != life {
			t.Fatalf("%s: %+v; want a lease of %v", p, r, life)
		}
		helpers[p] = hp
	}
	time.Sleep(3 * life)
	if err := exchange(server, raw.Status.External, "raw"); err == nil {
		t.Errorf("the unrenewed mapping %s still works after 3 leases: the renewal test proves nothing", raw.Status.External)
	}
	for p, hp := range helpers {
		st := hp.ask("status").Status
		t.Logf("%s after %v: %d renewals, expires in %v, last error %q", st.Text, 3*life, st.Renewals, time.Until(st.Expires).Round(time.Millisecond), st.Err)
		if st.Renewals < 4 || st.Err != "" || time.Until(st.Expires) <= 0 {
			t.Errorf("%s: %d renewals (want at least 4 in 3 leases), error %q, expires %v", p, st.Renewals, st.Err, st.Expires)
		}
		if err := exchange(server, st.External, string(p)); err != nil {
			t.Errorf("%s: renewed mapping %s: %v", p, st.External, err)
		}
		if c := hp.ask("close"); c.Err != "" {
			t.Errorf("%s: Close: %s", p, c.Err)
		}
	}
}

// A host whose gateway speaks neither protocol learns so in bounded time,
// in words naming both.
func TestLabPortMapNoGateway(t *testing.T) {
	topo := labtest.Up(t, "nat-zoo", nil)
	h := labtest.Host(t, topo, "preserve-h")
	_, r := startHelper(t, h, helperArgs{Port: 7020, Greet: "preserve-h"})
	t.Logf("after %v: %s", r.Elapsed, r.Err)
	for _, want := range []string{"no gateway mapped tcp port 7020", "NAT-PMP gateway " + h.Ifaces[0].Net.Gateway.String(), "no IGD answered on the LAN within 2s"} {
		if !strings.Contains(r.Err, want) {
			t.Errorf("error %q does not say %q", r.Err, want)
		}
	}
	if r.Elapsed > 4*time.Second {
		t.Errorf("took %v to fail; want about the 2s timeout", r.Elapsed)
	}
}
