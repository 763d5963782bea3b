package wan

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Port is one site's attachment to the emulated internet.
type Port struct {
	Name     string         // site name
	NetNS    string         // path of the network namespace holding the device, e.g. /run/netns/gl-das3v-gw; "" means the emulator's own namespace
	Dev      string         // TUN device name inside that namespace, e.g. "wan0"
	Prefixes []netip.Prefix // destination prefixes owned by this site (its public nets and WAN address)
}

// Link describes one emulated wide-area link between two sites, applied
// independently in each direction (A->B and B->A are separate pipes with the
// same parameters).
type Link struct {
	A, B  string        // site names; "*" "*" means the default for every pair not listed
	Delay time.Duration // one-way propagation delay
	Rate  int64         // bits per second of IP packets (no link-layer overhead); 0 means unlimited
	Loss  float64       // random (Bernoulli) loss probability per packet, 0..1
	Queue int           // queue limit in bytes (tail drop); 0 means DefaultQueue, or the link's bandwidth-delay product (Rate × 2·Delay) when that is larger
}

// Any in both Link.A and Link.B makes a link the default for every pair of
// sites that no other link names.
const Any = "*"

// DefaultQueue is the queue limit of a rate-limited link whose Queue is 0,
// unless the link's bandwidth-delay product is larger.
const DefaultQueue = 1536 * 1024

// Config is what Start needs.
type Config struct {
	Ports []Port
	Links []Link // pairs that no link names (and no "*" "*" default covers) get a perfect link: no delay, no rate limit, no loss
	Seed  int64  // loss RNG seed, 0 = random

	// NoOffload opens the devices without IFF_VNET_HDR, so every packet is
	// read and written at wire size. It is slower; it exists for comparison
	// and for kernels without TUN offloads.
	NoOffload bool

	// CPULatencyQoS holds a PM QoS request for zero CPU wake-up latency
	// (/dev/cpu_dma_latency) while the emulator runs, so idle CPUs poll
	// instead of halting. On virtual machines this makes delays markedly
	// more precise (wake-ups in µs instead of ~100 µs with millisecond
	// outliers), but it affects the whole machine: idle vCPUs look busy
	// to the host.
	CPULatencyQoS bool
}

// QueueLimit is the queue limit in bytes that l gets: Queue, or when Queue is
// 0 the larger of DefaultQueue and the bandwidth-delay product.
func (l Link) QueueLimit() int64 {
	if l.Queue > 0 {
		return int64(l.Queue)
	}
	q := int64(DefaultQueue)
	if l.Rate > 0 {
		bdp := float64(l.Rate) / 8 * (2 * l.Delay).Seconds()
		if bdp > float64(q) {
			q = int64(math.Min(bdp, math.MaxInt32))
		}
	}
	return q
}

func (l Link) String() string {
	return fmt.Sprintf("%s<->%s", l.A, l.B)
}

// validate checks cfg and returns, for every ordered pair of port indexes,
// the link that applies to it (links[i][j], unused for i == j).
func (cfg *Config) validate() ([][]Link, error) {
	if len(cfg.Ports) == 0 {
		return nil, errors.New("wan: no ports")
	}
	index := make(map[string]int, len(cfg.Ports))
	owner := make(map[netip.Prefix]string)
	for i, p := range cfg.Ports {
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("wan: port %d has no name", i)
		case p.Name == Any:
			return nil, fmt.Errorf("wan: port %d: %q is reserved for link defaults", i, Any)
		case p.Dev == "":
			return nil, fmt.Errorf("wan: port %q: no device", p.Name)
		case len(p.Dev) >= 16:
			return nil, fmt.Errorf("wan: port %q: device name %q longer than 15 bytes", p.Name, p.Dev)
		case len(p.Prefixes) == 0:
			return nil, fmt.Errorf("wan: port %q: no prefixes", p.Name)
		}
		if _, dup := index[p.Name]; dup {
			return nil, fmt.Errorf("wan: port %q defined twice", p.Name)
		}
		index[p.Name] = i
		for _, pfx := range p.Prefixes {
			if !pfx.IsValid() {
				return nil, fmt.Errorf("wan: port %q: invalid prefix %v", p.Name, pfx)
			}
			pfx = pfx.Masked()
			if o, dup := owner[pfx]; dup {
				return nil, fmt.Errorf("wan: port %q: prefix %v already owned by port %q", p.Name, pfx, o)
			}
			owner[pfx] = p.Name
		}
	}

	n := len(cfg.Ports)
	links := make([][]Link, n)
	set := make([][]bool, n)
	for i := range links {
		links[i] = make([]Link, n)
		set[i] = make([]bool, n)
	}
	var def *Link
	for k := range cfg.Links {
		l := cfg.Links[k]
		if err := l.check(); err != nil {
			return nil, fmt.Errorf("wan: link %v: %w", l, err)
		}
		if l.A == Any || l.B == Any {
			if l.A != l.B {
				return nil, fmt.Errorf("wan: link %v: a default link needs %q for both A and B", l, Any)
			}
			if def != nil {
				return nil, fmt.Errorf("wan: link %v: more than one default link", l)
			}
			def = &cfg.Links[k]
			continue
		}
		a, okA := index[l.A]
		b, okB := index[l.B]
		switch {
		case !okA:
			return nil, fmt.Errorf("wan: link %v: no port named %q", l, l.A)
		case !okB:
			return nil, fmt.Errorf("wan: link %v: no port named %q", l, l.B)
		case a == b:
			return nil, fmt.Errorf("wan: link %v: a site cannot link to itself", l)
		case set[a][b]:
			return nil, fmt.Errorf("wan: link %v: pair listed twice", l)
		}
		links[a][b], links[b][a] = l, l
		set[a][b], set[b][a] = true, true
	}
	for i := range links {
		for j := range links[i] {
			if i == j || set[i][j] {
				continue
			}
			if def != nil {
				links[i][j] = *def
			}
			links[i][j].A, links[i][j].B = cfg.Ports[i].Name, cfg.Ports[j].Name
		}
	}
	return links, nil
}

func (l Link) check() error {
	switch {
	case l.A == "" || l.B == "":
		return errors.New("both A and B must be named")
	case l.Delay < 0:
		return fmt.Errorf("negative delay %v", l.Delay)
	case l.Rate < 0:
		return fmt.Errorf("negative rate %d", l.Rate)
	case !(l.Loss >= 0 && l.Loss <= 1):
		return fmt.Errorf("loss %v outside 0..1", l.Loss)
	case l.Queue < 0:
		return fmt.Errorf("negative queue limit %d", l.Queue)
	}
	return nil
}
