package hubserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// logBuf collects a hub's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
	t     testing.TB
}

func (b *logBuf) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
}

func (b *logBuf) has(sub ...string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lines {
		all := true
		for _, s := range sub {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}

// rawNode is a hand-driven node connection: handshake and hello done, then
// whatever bytes the test writes (sealing them with the node's sealer when
// it wants the hub to read past the seal).
type rawNode struct {
	net.Conn
	sealer *wire.Sealer
}

func dialRaw(t *testing.T, addr, name string) *rawNode {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cr := creds(t)
	sec, err := hub.Secure(context.Background(), cr, c, true, identity.ID{}, "")
	if err != nil {
		t.Fatal(err)
	}
	hubID, sealer, r := sec.Peer, sec.Sealer, sec.Reader
	if err := hub.WriteHello(c, sealer, &wire.Hello{Role: "node", Machine: identity.Machine{ID: cr.Key.ID(), Name: name}, Version: wire.Version}); err != nil {
		t.Fatal(err)
	}
	if err := sec.Verdict(); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.ReadHello(r, hubID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawNode{c, sealer}
}

// seal re-encodes well-formed frames b as the node's sealer sends them.
func (n *rawNode) seal(t *testing.T, b []byte) []byte {
	t.Helper()
	r := wire.NewReader(bytes.NewReader(b))
	var out []byte
	for {
		f, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = n.sealer.Append(out, f.Type, f.Flags, f.Circuit, f.Payload)
	}
}

// loggedHub serves a hub on loopback for the rest of the test, collecting
// its log.
func loggedHub(t *testing.T) (*Hub, *logBuf) {
	t.Helper()
	logs := &logBuf{t: t}
	h, err := New(Config{Name: "h", Creds: creds(t), Listen: "127.0.0.1:0", Interval: testInterval, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	return h, logs
}

// closedByHub reads c until the hub closes it.
func closedByHub(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the hub kept the link open")
	}
}

func TestMalformedFrames(t *testing.T) {
	h, logs := loggedHub(t)
	addr := h.Addr().String()
	good1 := attachNode(t, "good1", addr)
	good2 := attachNode(t, "good2", addr)
	serve(good2, 7, echo)

	hdr := func(typ wire.Type, flags byte, circuit uint32, n int) []byte {
		b := make([]byte, wire.HeaderSize)
		wire.PutHeader(b, typ, circuit, n)
		b[1] = flags
		return b
	}
	open := func(circuit uint32) []byte {
		o := fmt.Sprintf(`{"from":{"id":"%s"},"to_node":"%s","port":7,"ttl":3,"window":262144}`, good1.Machine().ID, good2.Machine().ID)
		return wire.Append(nil, wire.TOpen, circuit, []byte(o))
	}
	cases := []struct {
		name   string
		bytes  []byte
		sealed bool // sealed as a good node would send it: the hub reads past the seal
		log    string
	}{
		{"garbage", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100), false, "unknown type 222"},
		{"oversized", hdr(wire.TData, 0, 1, wire.MaxPayload+1), false, "more than the"},
		{"unknown type", hdr(42, 0, 1, 0), false, "unknown type 42"},
		{"reserved flags", hdr(wire.TData, 4, 1, 0), false, "reserved bits"},
		{"unsealed control", wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: 1, Node: "good2"}})), false, "control frame not sealed"},
		{"unsealed open", open(1), false, "open frame not sealed"},
		{"forged seal", wire.Append(nil, wire.TSealed, 0, make([]byte, 64)), false, "failed authentication"},
		{"bad control", wire.Append(nil, wire.TControl, 0, []byte(`{"kind":"lookup"`)), true, "control message"},
		{"hub message from a node", wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KGossip, Gossip: &wire.Gossip{}})), true, "unexpected gossip message from a node"},
		{"second hello", wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KHello, Hello: &wire.Hello{Role: "node", Machine: good1.Machine()}})), true, "unexpected hello"},
		{"open with the hub's parity", open(2), true, "wrong parity"},
		{"open reusing a circuit", append(open(1), open(1)...), true, "in use"},
		{"bad open", wire.Append(nil, wire.TOpen, 1, []byte(`{"ttl":99}`)), true, "open"},
		{"bad window", append(open(1), wire.Append(nil, wire.TWindow, 1, wire.WindowPayload(0))...), true, "window increment 0"},
		{"truncated frame", hdr(wire.TData, 0, 1, 100), false, "closed"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("bad%d", i)
			c := dialRaw(t, addr, name)
			b := tc.bytes
			if tc.sealed {
				b = c.seal(t, b)
			}
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			if tc.name == "truncated frame" {
				c.Conn.(*net.TCPConn).CloseWrite()
			}
			closedByHub(t, c)
			testwait.Until(t, "the hub to log why it closed "+name, 5*time.Second, func() bool { return logs.has("node "+name+" (", tc.log) })
			// The hub goes on serving everyone else.
			cir := openTo(t, good1, good2, 7)
			roundTrip(t, cir, "still here after "+tc.name)
		})
	}
	// Garbage instead of a TLS handshake.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(bytes.Repeat([]byte("GET / HTTP/1.0\r\n\r\n"), 10))
	closedByHub(t, c)
	c.Close()
	if ms, err := good1.Lookup(context.Background(), "good2"); err != nil || len(ms) != 1 {
		t.Fatalf("lookup after the abuse: %v %v", ms, err)
	}
	if n := len(h.Nodes()); n != 2 {
		t.Errorf("hub lists %d nodes, want the 2 good ones", n)
	}
}
