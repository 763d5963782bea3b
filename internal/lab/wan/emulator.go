package wan

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Emulator is a running emulated internet. Make one with Start and stop it
// with Close.
type Emulator struct {
	ports  []*port
	pipes  [][]*pipe // [from][to]; nil on the diagonal
	routes *routeTable
	spin   *spinner

	qos       *os.File // held PM QoS request, if any
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// port is one attached site.
type port struct {
	idx int
	cfg Port
	tun *tunDevice
	c   portCounters
	err atomic.Pointer[error] // why the reader stopped early
	seg tcp4Segmenter         // the reader's scratch segmenter
}

// Start attaches to every port's TUN device and starts forwarding. On error
// nothing is left attached.
func Start(cfg Config) (*Emulator, error) {
	links, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	seed := uint64(cfg.Seed)
	if seed == 0 {
		seed = rand.Uint64()
	}
	e := &Emulator{
		routes: newRouteTable(cfg.Ports),
		spin:   newSpinner(),
		done:   make(chan struct{}),
	}
	fail := func(err error) (*Emulator, error) {
		e.release()
		return nil, err
	}
	if cfg.CPULatencyQoS {
		if e.qos, err = cpuLatencyQoS(); err != nil {
			return nil, err
		}
	}
	for i, pc := range cfg.Ports {
		tun, err := openTUN(pc.NetNS, pc.Dev, !cfg.NoOffload)
		if err != nil {
			return fail(fmt.Errorf("wan: port %q: open tun %s in %s: %w", pc.Name, pc.Dev, nsName(pc.NetNS), err))
		}
		e.ports = append(e.ports, &port{idx: i, cfg: pc, tun: tun})
	}
	e.pipes = make([][]*pipe, len(e.ports))
	for i, from := range e.ports {
		e.pipes[i] = make([]*pipe, len(e.ports))
		for j, to := range e.ports {
			if i == j {
				continue
			}
			p, err := newPipe(from, to, links[i][j], pairSeed(seed, from.cfg.Name, to.cfg.Name), e.spin)
			if err != nil {
				return fail(fmt.Errorf("wan: pipe %s->%s: %w", from.cfg.Name, to.cfg.Name, err))
			}
			e.pipes[i][j] = p
		}
	}
	for _, row := range e.pipes {
		for _, p := range row {
			if p != nil {
				e.wg.Add(1)
				go func() {
					defer e.wg.Done()
					p.run(e.done)
				}()
			}
		}
	}
	for _, p := range e.ports {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.read(p)
		}()
	}
	return e, nil
}

func nsName(path string) string {
	if path == "" {
		return "the current namespace"
	}
	return path
}

// pairSeed derives a pipe's loss seed from the emulator's seed and the
// pair's names, so a pair keeps its loss sequence when ports are added or
// reordered.
func pairSeed(seed uint64, from, to string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(from))
	h.Write([]byte{0})
	h.Write([]byte(to))
	return seed ^ h.Sum64()
}

// Close stops forwarding, detaches from all devices (which stay, as the lab
// builder made them) and returns once every goroutine has finished. Packets
// still in flight are discarded.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		close(e.done)
		e.closeErr = e.release()
	})
	return e.closeErr
}

// release closes devices and timers, waits for the goroutines and frees
// what the pipes still hold.
func (e *Emulator) release() error {
	var errs []error
	for _, p := range e.ports {
		if err := p.tun.Close(); err != nil {
			errs = append(errs, fmt.Errorf("wan: port %q: close tun %s: %w", p.cfg.Name, p.cfg.Dev, err))
		}
	}
	for _, row := range e.pipes {
		for _, p := range row {
			if p != nil {
				p.sl.Close()
			}
		}
	}
	e.wg.Wait()
	if e.qos != nil {
		e.qos.Close()
	}
	for _, row := range e.pipes {
		for _, p := range row {
			if p != nil {
				p.drain()
			}
		}
	}
	return errors.Join(errs...)
}

func (e *Emulator) closing() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// read is a port's reader: it reads what the site sends and hands each
// packet to the pipe towards its destination.
func (e *Emulator) read(p *port) {
	hl := 0
	if p.tun.vnet {
		hl = vnetHdrLen
	}
	rb := getBuffer(largeBufSize)
	defer func() { putBuffer(rb) }()
	for {
		n, err := p.tun.Read(rb.b)
		if err != nil {
			if e.closing() || errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
				continue
			}
			err = fmt.Errorf("wan: port %q: read tun %s: %w", p.cfg.Name, p.cfg.Dev, err)
			p.err.Store(&err)
			return
		}
		if e.dispatch(p, rb, n, hl, monoNow()) {
			rb = getBuffer(largeBufSize)
		}
	}
}

// dispatch routes one packet read from p's device into rb.b[:n] (a
// virtio_net_hdr of hl bytes first) and reports whether a pipe kept rb.
func (e *Emulator) dispatch(p *port, rb *buffer, n, hl int, now int64) bool {
	if n <= hl {
		p.c.malformed.Add(1)
		return false
	}
	pkt := rb.b[hl:n]
	a := arrival{buf: rb, n: n, segs: 1, wire: len(pkt), at: now}
	if hl > 0 {
		if h := decodeVnetHdr(rb.b); h.gsoType != gsoNone {
			s, err := newTCP4Segmenter(pkt, h)
			if err != nil {
				p.c.malformed.Add(1)
				return false
			}
			p.seg = s
			a.seg = &p.seg
			a.segs, a.wire = s.wire()
		}
	}
	p.c.received.Add(uint64(a.segs))
	p.c.bytes.Add(uint64(a.wire))

	to := e.routes.lookup(pkt)
	switch {
	case to < 0:
		if _, ok := packetDst(pkt); ok {
			p.c.unroutable.Add(uint64(a.segs))
		} else {
			p.c.malformed.Add(1)
		}
		return false
	case int(to) == p.idx:
		// A site talking to its own prefixes (if its routes send that to
		// the WAN at all) gets its packets straight back.
		if _, err := p.tun.Write(rb.b[:n]); err == nil {
			p.c.looped.Add(uint64(a.segs))
		}
		return false
	}
	return e.pipes[p.idx][to].offer(&a)
}
