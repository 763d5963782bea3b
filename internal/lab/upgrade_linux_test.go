package lab_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
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

// counterStream is a byte stream that names its own offsets: the 8-byte
// little-endian words 0, 1, 2, ... A byte lost, duplicated or reordered
// shows as a word out of place.
type counterStream struct{ off uint64 }

func (s *counterStream) Read(p []byte) (int, error) {
	var w [8]byte
	for i := range p {
		if s.off%8 == 0 || i == 0 {
			binary.LittleEndian.PutUint64(w[:], s.off/8)
		}
		p[i] = w[s.off%8]
		s.off++
	}
	return len(p), nil
}

// upgradeFlow is a gridlink nc run fed from a counterStream, its echo
// checked and counted.
type upgradeFlow struct {
	cmd    *exec.Cmd
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	got    int64
	bad    error       // the first byte out of place
	counts []flowCount // every 100 ms
	err    error       // how nc ended
}

type flowCount struct {
	at time.Time
	n  int64
}

// startFlow runs gridlink nc [extra] addr in h through its agent.
func startFlow(t *testing.T, bin string, h *topology.Host, addr string, extra ...string) *upgradeFlow {
	f := &upgradeFlow{stop: make(chan struct{}), done: make(chan struct{})}
	argv := append([]string{"netns", "exec", lab.HostNS(h), bin, "nc"}, extra...)
	f.cmd = exec.Command("ip", append(argv, addr)...)
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	errf, err := os.Create(t.TempDir() + "/nc.err")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	f.cmd.Stderr = errf
	in, err := f.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // write until stopped, then half-close
		src := &counterStream{}
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-f.stop:
				in.Close()
				return
			default:
			}
			n, _ := src.Read(buf)
			if _, err := in.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	go func() { // read and check the echo
		want := &counterStream{}
		buf, exp := make([]byte, 64<<10), make([]byte, 64<<10)
		tick := time.Now()
		for {
			n, err := out.Read(buf)
			want.Read(exp[:n])
			f.mu.Lock()
			if f.bad == nil {
				for i := 0; i < n; i++ {
					if buf[i] != exp[i] {
						f.bad = fmt.Errorf("byte %d: %#x, want %#x", f.got+int64(i), buf[i], exp[i])
						break
					}
				}
			}
			f.got += int64(n)
			if now := time.Now(); now.Sub(tick) >= 100*time.Millisecond {
				f.counts = append(f.counts, flowCount{now, f.got})
				tick = now
			}
			f.mu.Unlock()
			if err != nil {
				break
			}
		}
		f.err = f.cmd.Wait()
		close(f.done)
	}()
	t.Cleanup(func() {
		f.halt()
		_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
		<-f.done
	})
	return f
}

func (f *upgradeFlow) halt() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
}

func (f *upgradeFlow) received() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

// progress says when the echo last grew.
func (f *upgradeFlow) progress() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.counts) == 0 {
		return "no echo counted"
	}
	return fmt.Sprintf("the echo last counted %v ago", time.Since(f.counts[len(f.counts)-1].at).Round(time.Millisecond))
}

// rate is the echo's rate in Mbit/s between from and to.
func (f *upgradeFlow) rate(from, to time.Time) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var a, b *flowCount
	for i := range f.counts {
		c := &f.counts[i]
		if a == nil && !c.at.Before(from) {
			a = c
		}
		if !c.at.After(to) {
			b = c
		}
	}
	if a == nil || b == nil || !b.at.After(a.at) {
		return 0
	}
	return float64(b.n-a.n) * 8 / b.at.Sub(a.at).Seconds() / 1e6
}

// stacks has each process (a gridlink command, run by ip netns exec,
// which execs it) dump its goroutines (SIGQUIT: it ends) and returns the
// goroutines that are in gridlink's own code, by name, for a test that
// found them stuck.
func stacks(cmds map[string]*exec.Cmd) string {
	var b strings.Builder
	for name, c := range cmds {
		var out bytes.Buffer
		switch w := c.Stderr.(type) {
		case *os.File:
			_ = syscall.Kill(c.Process.Pid, syscall.SIGQUIT)
			time.Sleep(time.Second)
			full, _ := os.ReadFile(w.Name())
			out.Write(full)
		default:
			fmt.Fprintf(&b, "== %s: its stderr is not a file\n", name)
			continue
		}
		fmt.Fprintf(&b, "== %s\n", name)
		for _, g := range strings.Split(out.String(), "\n\n") {
			if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "gridlink/gridlink/") {
				b.WriteString(g)
				b.WriteString("\n\n")
			}
		}
	}
	return b.String()
}

// agentStatus is the agent's status in h.
func agentStatus(ctx context.Context, bin string, h *topology.Host) (status.Agent, error) {
	var st status.Agent
	out, errb, err := tryIn(ctx, h, nil, bin, "status", "--json")
	if err != nil {
		return st, fmt.Errorf("%v: %s", err, errb)
	}
	err = json.Unmarshal(out, &st)
	return st, err
}

// Issue 20's live path upgrade on wan (two public hosts across one
// emulated link): the hub and node agent na at a-a, node agent nb at
// b-b, whose firewall (the test's nft table) drops every TCP packet to
// and from a-a but the hub's port, so na and nb reach each other only
// routed. A gridlink nc stream from a-a to nb (live path upgrade is on
// by default: no flag) runs through an echo (labtest.Echo) exposed at b-b; the
// table is deleted mid-flight: the link moves to direct within 2 s
// (measured from the lift to the switch the agent's status records), no
// byte is lost (every echoed word checked), and the throughput after the
// switch is logged beside a direct nc
// stream's, run afterwards for as long.
//
// The 2 s bound holds while a try is under way or due: the firewall
// drops, so a try waits on its SYNs' retransmissions, which pass once
// the table is gone (lifted 3 s into the flow: 214-319 ms; 12 s in,
// between two tries: 525 ms). Tries come 1, 2, 4, ... 30 s apart
// (link/upgrade.go): a lift late in a long link's life waits for the
// next one.
//
// The hub runs at a-a, so routed crosses the emulated link once, as
// direct does: the rates compare the upgraded stream with a direct one,
// not routed with direct.
func TestWanUpgrade(t *testing.T) {
	N := &natHubs{t: t, bin: gridlinkBin(t), hubs: map[string]*proc{}}
	N.topo = labtest.Up(t, "wan", map[string]string{"rtt": "10ms", "rate": "200mbit"})
	up := time.Now()
	defer func() { t.Logf("the case took %v after the bring-up", time.Since(up).Round(100*time.Millisecond)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	a, b := N.host("a-a"), N.host("b-b")
	aAddr := a.PrimaryAddr().String()
	fw := fmt.Sprintf(`table inet upgtest {
	chain out { type filter hook output priority 0; ip daddr %s tcp dport != 7946 drop; }
	chain in { type filter hook input priority 0; ip saddr %s tcp sport != 7946 drop; }
}`, aAddr, aAddr)
	if out, errb, err := tryIn(ctx, b, []byte(fw), "nft", "-f", "-"); err != nil {
		t.Fatalf("firewall b-b: %v %s %s", err, out, errb)
	}
	N.startHub(a, "ha", N.issue(ca.Hub, "ha"))
	na := N.startNode(a, "na", a)
	nb := N.startNode(b, "nb", a)
	for _, h := range []*topology.Host{a, b} {
		testwait.Until(t, h.ID()+"'s agent attached", 20*time.Second, func() bool {
			st, err := agentStatus(ctx, N.bin, h)
			return err == nil && st.Attach == ""
		})
	}
	labtest.Listen(t, b, "127.0.0.1:9000", labtest.Echo)
	expose := startIn(t, b, "expose", N.bin, "expose", "9000")
	expose.waitLog(t, "reachable as", 20*time.Second)

	// the upgrading stream (the default): routed while the firewall stands
	var f *upgradeFlow
	testwait.Until(t, "an nc stream a-a -> nb:9000", 30*time.Second, func() bool {
		f = startFlow(t, N.bin, a, "nb:9000")
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if f.received() > 0 {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		f.halt()
		return false
	})
	flowStart := time.Now()
	var link status.StreamLink
	st, err := agentStatus(ctx, N.bin, a)
	if err != nil || len(st.Links) != 1 {
		t.Fatalf("a-a's status: %v, links %+v", err, st.Links)
	}
	if link = st.Links[0]; link.Method != "routed" || !link.Upgrade {
		t.Fatalf("a-a -> nb:9000 with the firewall in place: %+v, want routed and upgrading", link)
	}
	time.Sleep(3 * time.Second) // some seconds of the flow routed
	if out, errb, err := tryIn(ctx, b, nil, "nft", "delete", "table", "inet", "upgtest"); err != nil {
		t.Fatalf("lift the firewall: %v %s %s", err, out, errb)
	}
	lifted := time.Now()
	routedRate := f.rate(flowStart.Add(time.Second), lifted)
	// the first switch is to a connection between the two hosts: direct
	// (a-a dialled it) or reverse (nb did), whichever the race gave; the
	// bound is the issue's. From reverse it goes on to direct (the next
	// try, 1 s later).
	var first status.PathSwitch
	testwait.Until(t, "a switch in a-a's status", 20*time.Second, func() bool {
		st, err := agentStatus(ctx, N.bin, a)
		if err != nil || len(st.Links) != 1 || len(st.Links[0].Switches) == 0 {
			return false
		}
		first = st.Links[0].Switches[0]
		return true
	})
	took := first.At.Sub(lifted)
	t.Logf("a-a -> nb:9000: %s -> %s %v after the lift (%.1f s into the flow)", first.From, first.To, took.Round(time.Millisecond), lifted.Sub(flowStart).Seconds())
	if first.From != "routed" || (first.To != "direct" && first.To != "reverse") {
		t.Errorf("first switch %+v: want routed -> direct or reverse", first)
	}
	if took > 2*time.Second {
		t.Errorf("the switch came %v after the firewall was lifted, want within 2 s", took)
	}
	testwait.Until(t, "a-a -> nb:9000 direct", 10*time.Second, func() bool {
		st, err := agentStatus(ctx, N.bin, a)
		if err != nil || len(st.Links) != 1 {
			return false
		}
		link = st.Links[0]
		// the path comes from the link's live connections, its switches
		// from the upgrade loop, which records one as the new connection
		// joins (before it did so once the old ones were closed, and a
		// status in between, direct with no switch to direct, failed a
		// CI run): both are asked for.
		return link.Method == "direct" && len(link.Switches) > 0 && link.Switches[len(link.Switches)-1].To == "direct"
	})
	sw := link.Switches[len(link.Switches)-1]
	t.Logf("a-a -> nb:9000 now %s, switches %+v", link.Method, link.Switches)
	if sw.To != "direct" {
		t.Errorf("last switch %+v, want to direct", sw)
	}
	text, _, _ := tryIn(ctx, a, nil, N.bin, "status")
	t.Logf("gridlink status at a-a:\n%s", text)
	if !strings.Contains(string(text), "switched "+first.From+" -> "+first.To+" at ") {
		t.Errorf("gridlink status shows no switch %s -> %s", first.From, first.To)
	}
	time.Sleep(time.Until(sw.At.Add(6 * time.Second)))
	afterRate := f.rate(sw.At.Add(time.Second), time.Now())
	f.halt()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the upgraded stream did not end 10 s after its input did (%d bytes echoed)", f.received())
	}
	f.mu.Lock()
	bad, got := f.bad, f.got
	f.mu.Unlock()
	if bad != nil || f.err != nil {
		t.Fatalf("the upgraded stream: %v; nc: %v (%d bytes echoed)", bad, f.err, got)
	}

	// a direct stream for comparison, as long
	d := startFlow(t, N.bin, a, "nb:9000")
	dStart := time.Now()
	time.Sleep(6 * time.Second)
	st, err = agentStatus(ctx, N.bin, a)
	if err != nil || len(st.Links) != 1 {
		t.Fatalf("a-a's status: %v, links %+v", err, st.Links)
	}
	directRate := d.rate(dStart.Add(time.Second), time.Now())
	d.halt()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		// two CI runs of 2026-11-26 stopped here, both ends of nc
		// blocked: the echo was socat's PIPE, which can block on its
		// own pipe for good (the goroutines below showed nb's agent
		// blocked writing to it and reading from it). Should a stream
		// stall again, say what the agents saw and where they were.
		ta, _, _ := tryIn(ctx, a, nil, N.bin, "status")
		tb, _, _ := tryIn(ctx, b, nil, N.bin, "status")
		t.Logf("where the agents and nc were:\n%s", stacks(map[string]*exec.Cmd{"na": na.cmd, "nb": nb.cmd, "nc": d.cmd}))
		t.Fatalf("the direct stream did not end 10 s after its input did (%d bytes echoed, %s)\ngridlink status at a-a:\n%s\ngridlink status at b-b:\n%s", d.received(), d.progress(), ta, tb)
	}
	t.Logf("echoed through nc a-a -> nb:9000 (rtt 10 ms, 200 Mbit/s): routed before the lift %.1f Mbit/s, after the switch %.1f Mbit/s (%d bytes in all, every one in place); a %s stream afterwards %.1f Mbit/s",
		routedRate, afterRate, got, st.Links[0].Method, directRate)
	if d.bad != nil {
		t.Errorf("the direct stream: %v", d.bad)
	}
}
