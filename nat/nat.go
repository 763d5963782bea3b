// Package nat classifies a NAT's behaviour from observations of the
// mappings it made (what an outside observer, a hub, saw as the source of
// connections from known local ports) and predicts the external ports of
// the next mappings, for TCP splicing (shared/seeds/000 §3.3.3). It owns
// the classification, the prediction, observing this host from hubs and
// the simultaneous open with its timing (Punch, Offer, Answer: connects
// that a rejecting NAT or firewall refuses are made again within the
// attempt, retry.go); the rendezvous messages and what runs over a splice
// are the hubs' and the virtual connection layer's.
package nat

import (
	"fmt"
	"net/netip"
	"sort"
	"time"
)

// Observation is one mapping as an outside observer saw it.
type Observation struct {
	Local    netip.AddrPort // the connection's source as the node made it
	External netip.AddrPort // its source as the observer saw it
	Observer string         // who saw it (e.g. a hub's name)
	At       time.Time      // when the connection was made
}

// Allocation is how a NAT picks the external port of a new mapping.
type Allocation int

// Port allocation behaviours.
const (
	Unknown    Allocation = iota // too few or inconsistent observations
	None                         // no NAT: the observer sees the local address
	Preserving                   // the external port is the local port
	Sequential                   // each new mapping takes the last port plus Delta
	Random                       // no pattern: ports cannot be predicted
)

var allocNames = [...]string{"unknown", "no NAT", "port-preserving", "sequential", "random"}

func (a Allocation) String() string { return allocNames[a] }

// Mapping is whether one local port keeps its external port whatever the
// destination.
type Mapping int

// Mapping behaviours (RFC 4787).
const (
	MappingUnknown      Mapping = iota
	EndpointIndependent         // same external port toward every observer
	EndpointDependent           // a new external port per destination ("symmetric")
)

var mappingNames = [...]string{"unknown", "endpoint-independent", "endpoint-dependent"}

func (m Mapping) String() string { return mappingNames[m] }

// Class is what the observations say about a NAT.
type Class struct {
	Allocation Allocation
	Delta      int // Sequential: the usual step between consecutive mappings
	Mapping    Mapping
	External   netip.Addr // the NAT's external address, if one was seen consistently
}

func (c Class) String() string {
	s := c.Allocation.String()
	if c.Allocation == Sequential {
		s += fmt.Sprintf(" (+%d)", c.Delta)
	}
	if c.Mapping != MappingUnknown {
		s += ", " + c.Mapping.String() + " mapping"
	}
	if c.External.IsValid() && c.Allocation != None {
		s += ", external address " + c.External.String()
	}
	return s
}

// Predictable reports whether the next mappings' ports can be predicted.
func (c Class) Predictable() bool {
	return c.Allocation == None || c.Allocation == Preserving || c.Allocation == Sequential
}

// maxDelta bounds the step a sequential NAT is believed to take; larger
// steps look random.
const maxDelta = 16

// stepWindow is how close in time two observations must be for the step
// between their mappings to say how the NAT allocates (Classify).
const stepWindow = time.Second

// Classify classifies a NAT from observations (at least two made from
// distinct local ports are needed for anything but Unknown).
func Classify(obs []Observation) Class {
	var c Class
	if len(obs) == 0 {
		return c
	}
	obs = append([]Observation(nil), obs...)
	sort.SliceStable(obs, func(i, j int) bool { return obs[i].At.Before(obs[j].At) })

	// the external address, if one is seen throughout.
	ext := obs[0].External.Addr()
	same, untranslated := true, true
	for _, o := range obs {
		same = same && o.External.Addr() == ext
		untranslated = untranslated && o.External == o.Local
	}
	if same {
		c.External = ext
	}
	c.Mapping = mapping(obs)
	if untranslated {
		c.Allocation = None
		return c
	}
	// the first mapping of each local port, in time order.
	var firsts []Observation
	seen := map[netip.AddrPort]bool{}
	for _, o := range obs {
		if !seen[o.Local] {
			seen[o.Local] = true
			firsts = append(firsts, o)
		}
	}
	if len(firsts) < 2 {
		return c
	}
	preserved := 0
	for _, o := range firsts {
		if o.External.Port() == o.Local.Port() {
			preserved++
		}
	}
	// a port-preserving NAT changes the port only on a clash.
	if 4*preserved >= 3*len(firsts) {
		c.Allocation = Preserving
		return c
	}
	// steps between consecutive new mappings: a sequential NAT shows one
	// small step, sometimes a multiple of it when other hosts behind the
	// same NAT took ports in between.
	// Only steps between mappings made close together count when there
	// are two or more of them: across a long gap (an observer that timed
	// out between two observations) the host's other connections move the
	// counter on by any amount (seen: 20 ports in 5 s).
	var steps, close []int
	for i := 1; i < len(firsts); i++ {
		st := portStep(firsts[i-1].External.Port(), firsts[i].External.Port())
		steps = append(steps, st)
		if firsts[i].At.Sub(firsts[i-1].At) <= stepWindow {
			close = append(close, st)
		}
	}
	if len(close) >= 2 && len(close) < len(steps) {
		steps = close
	}
	if d := commonStep(steps); d > 0 {
		c.Allocation, c.Delta = Sequential, d
		return c
	}
	c.Allocation = Random
	return c
}

// portStep is the forward distance from port a to port b, wrapping at the
// end of the port space.
func portStep(a, b uint16) int {
	d := int(b) - int(a)
	if d < 0 {
		d += 65536 - 1024 // NATs wrap back into the non-privileged range
	}
	return d
}

// commonStep returns the step of a sequential NAT: the greatest common
// divisor when every step is small, else d if most steps equal d and the
// others are small multiples of it, allowing a few outliers (the counter
// wrapping, a burst of other hosts' mappings); else 0.
func commonStep(steps []int) int {
	// every step small: a sequential NAT whose counter other connections
	// (this host's own, other hosts') moved on in between, by irregular
	// amounts. A random allocator practically never gives that.
	g := 0
	for _, s := range steps {
		if s <= 0 || s > maxDelta {
			g = 0
			break
		}
		g = gcd(g, s)
	}
	if g > 0 && len(steps) >= 2 {
		return g
	}
	count := map[int]int{}
	for _, s := range steps {
		if s > 0 && s <= maxDelta {
			count[s]++
		}
	}
	best, n := 0, 0
	for d, k := range count {
		if k > n || (k == n && d < best) {
			best, n = d, k
		}
	}
	if best == 0 || 2*n <= len(steps) {
		return 0
	}
	outliers := 0
	for _, s := range steps {
		if s <= 0 || s%best != 0 || s/best > 4 {
			outliers++
		}
	}
	if outliers > len(steps)/4 {
		return 0
	}
	return best
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mapping tells endpoint-independent from endpoint-dependent mapping by
// local ports seen by more than one observer.
func mapping(obs []Observation) Mapping {
	byLocal := map[netip.AddrPort]map[string]netip.AddrPort{}
	for _, o := range obs {
		if byLocal[o.Local] == nil {
			byLocal[o.Local] = map[string]netip.AddrPort{}
		}
		byLocal[o.Local][o.Observer] = o.External
	}
	m := MappingUnknown
	for _, seen := range byLocal {
		if len(seen) < 2 {
			continue
		}
		var first netip.AddrPort
		for _, e := range seen {
			if !first.IsValid() {
				first = e
			} else if e != first {
				return EndpointDependent
			}
		}
		m = EndpointIndependent
	}
	return m
}

// Predict returns up to n external ports the NAT is likely to give the
// next mapping, most likely first: for a new connection from local port
// local, after the last observation last. It returns nil when the class
// is not predictable.
func Predict(c Class, last Observation, local uint16, n int) []uint16 {
	switch c.Allocation {
	case None, Preserving:
		return []uint16{local}
	case Sequential:
		out := make([]uint16, 0, n)
		p := int(last.External.Port())
		for i := 1; i <= n; i++ {
			q := p + i*c.Delta
			for q > 65535 {
				q -= 65536 - 1024
			}
			out = append(out, uint16(q))
		}
		return out
	}
	return nil
}
