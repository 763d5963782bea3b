package direct

import (
	"net"
	"sync"
	"testing"
)

// A pending connection whose whole first message is already in its
// socket is not shed as idle, although no handshake has read it yet (on
// a machine too busy to run the goroutine that will): the gate looks
// before it sheds (Gate.Spoke), and an idle one goes instead. Issue 32
// item 6: under a flood a node's connection accepted before its
// ClientHello came was shed with the hello in its socket.
func TestGateSparesSpoken(t *testing.T) {
	var mu sync.Mutex
	spoken := map[net.Conn]bool{}
	g := &Gate{Max: 3, PerSource: 2, Spoke: func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		return spoken[c]
	}}
	node := fake("127.0.0.1", 1)
	pn, _ := g.Admit(node) // accepted before its ClientHello came
	idle1, idle2 := fake("127.20.0.1", 1), fake("127.21.0.1", 1)
	g.Admit(idle1)
	g.Admit(idle2)
	mu.Lock()
	spoken[node] = true // the ClientHello is in; nothing has read it
	mu.Unlock()
	_, shed := g.Admit(fake("127.22.0.1", 1))
	if shed == nil || node.closed.Load() || !idle1.closed.Load() {
		t.Fatalf("full, the oldest pending connection's ClientHello in its socket: shed %+v, node closed %v, idle1 closed %v; want idle1 shed, the node kept", shed, node.closed.Load(), idle1.closed.Load())
	}
	if pn.Err() != nil {
		t.Fatalf("the node's connection: %v", pn.Err())
	}
	// It now counts as greeted: every idle connection goes before it.
	for i := range 4 {
		g.Admit(fake("127.23.0.1", i))
	}
	if node.closed.Load() {
		t.Fatal("the node's connection was shed before idle ones")
	}
	// Per address as well: a spoken connection does not count as idle.
	gs := &Gate{Max: 100, PerSource: 1, Spoke: g.Spoke}
	a1, a2 := fake("127.1.0.1", 1), fake("127.1.0.1", 2)
	gs.Admit(a1)
	mu.Lock()
	spoken[a1] = true
	mu.Unlock()
	if _, shed := gs.Admit(a2); shed != nil || a1.closed.Load() {
		t.Fatalf("a second connection from an address whose first spoke: shed %+v", shed)
	}
	// Out of descriptors: the spoken one is spared too.
	if s, ok := gs.ShedOldest("test"); !ok || a1.closed.Load() || !a2.closed.Load() {
		t.Fatalf("ShedOldest: %+v %v; a1 closed %v, a2 closed %v", s, ok, a1.closed.Load(), a2.closed.Load())
	}
}
