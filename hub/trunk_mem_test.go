package hub

import (
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// A hub pings thousands of idle nodes' trunks at once: a ping queued on
// an idle trunk takes a small buffer, not a pooled 64 KiB block (which had
// a hub of 2,000 idle nodes hold 43 MiB of blocks, make scale's heap
// profile). 2,000 trunks whose peers read nothing, each pinged once, hold
// under 16 MiB, about 4 KiB a trunk with its pipe (with 64 KiB blocks:
// 132 MiB).
func TestIdlePingsHoldSmallBuffers(t *testing.T) {
	const trunks = 2000
	sealer, err := wire.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var held []*Trunk
	for range trunks {
		a, b := net.Pipe() // b never reads: the ping stays queued (or in a blocked write)
		t.Cleanup(func() { a.Close(); b.Close() })
		l := NewTrunk(a, sealer, "test", false)
		l.Ping()
		held = append(held, l)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grew := int64(ms.HeapInuse) - int64(before)
	t.Logf("%d pinged idle trunks: heap grew %d KiB, %.1f KiB a trunk", trunks, grew>>10, float64(grew)/1024/trunks)
	if grew > 16<<20 {
		t.Errorf("%d pinged idle trunks hold %d KiB: %.1f KiB each", trunks, grew>>10, float64(grew)/1024/trunks)
	}
	runtime.KeepAlive(held)
}

// A trunk whose writer went idle keeps no sealing buffer: a control
// message of 3 KiB grew it, and it was kept for ever (up to 4 KiB a
// trunk; a hub's idle nodes kept about 450 bytes each, BenchmarkHubRSS's
// profile).
func TestIdleTrunkKeepsNoSealingBuffer(t *testing.T) {
	sealer, err := wire.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer b.Close()
	go io.Copy(io.Discard, b)
	l := NewTrunk(a, sealer, "test", false)
	defer l.Close(nil)
	if !l.Send(wire.TControl, 0, 0, make([]byte, 3<<10)) {
		t.Fatal("trunk closed")
	}
	testwait.Until(t, "the trunk's writer to go idle and exit", 0, func() bool {
		l.qmu.Lock()
		defer l.qmu.Unlock()
		return !l.writing
	})
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.scratch != nil {
		t.Errorf("an idle trunk keeps a sealing buffer of %d bytes", cap(l.scratch))
	}
}
