package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/status"
)

// Node is a node's collector: it reads Counters at every scrape.
type Node struct {
	// Counters reads the node's counts (vconn's Node.Counters).
	Counters func() status.NodeCounters
	// Attached, if set, says whether the node is attached to a hub now.
	Attached func() bool
	// Virtual, if set, reads the virtual IP network's bytes and peers
	// (package vip), reported as path kind "virtual" (status.PathVirtual);
	// nil: no such series (a node without --vip).
	Virtual func() status.PathBytes
	// VirtualCounters, if set, reads the virtual IP network's counters:
	// its bytes and connected peers as path kind "virtual" (in place of
	// Virtual's), its packets by direction and its drops by reason
	// (vip.go); nil: no such series.
	VirtualCounters func() status.VIPCounters
	// ExitCounters, if set, reads the exit service's counts (exit.go);
	// nil: no such series (a node without --allow-exit).
	ExitCounters func() status.ExitCounters
}

var (
	nodeSent      = desc("node", "sent_bytes_total", "Payload bytes written to the node's virtual connections, by path kind (direct, reverse, splice, routed; virtual: the virtual network).", "path")
	nodeReceived  = desc("node", "received_bytes_total", "Payload bytes read from the node's virtual connections, by path kind.", "path")
	nodeOpen      = desc("node", "connections", "Open virtual connections, by path kind.", "path")
	nodeSetups    = desc("node", "setups_total", "Connection setup attempts, by method and outcome (ok, failed, refused, canceled: the race was decided or the caller stopped).", "method", "outcome")
	nodeSetupTime = desc("node", "setup_duration_seconds", "How long the setups of the connections the node dialled took, by the method that made them.", "method")
	nodeAttached  = desc("node", "attached", "1 while the node is attached to a hub, else 0.")
)

// Describe sends the node's metric descriptions.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeSent, nodeReceived, nodeOpen, nodeSetups, nodeSetupTime} {
		ch <- d
	}
	if n.Attached != nil {
		ch <- nodeAttached
	}
	if n.VirtualCounters != nil {
		ch <- vipPackets
		ch <- vipDropped
	}
	if n.ExitCounters != nil {
		describeExit(ch)
	}
}

// Collect reads the node's counters and sends them.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	c := n.Counters()
	if n.VirtualCounters != nil {
		v := n.VirtualCounters()
		c.Paths = append(c.Paths, virtualPath(v))
		collectVIP(ch, v)
	} else if n.Virtual != nil {
		v := n.Virtual()
		v.Path = status.PathVirtual
		c.Paths = append(c.Paths, v)
	}
	for _, p := range c.Paths {
		ch <- prometheus.MustNewConstMetric(nodeSent, prometheus.CounterValue, float64(p.SentBytes), p.Path)
		ch <- prometheus.MustNewConstMetric(nodeReceived, prometheus.CounterValue, float64(p.ReceivedBytes), p.Path)
		ch <- prometheus.MustNewConstMetric(nodeOpen, prometheus.GaugeValue, float64(p.Open), p.Path)
	}
	for _, s := range c.Setups {
		ch <- prometheus.MustNewConstMetric(nodeSetups, prometheus.CounterValue, float64(s.Count), s.Method, s.Outcome)
	}
	for _, h := range c.SetupTimes {
		ch <- constHistogram(nodeSetupTime, h, h.Method)
	}
	if n.ExitCounters != nil {
		collectExit(ch, n.ExitCounters())
	}
	if n.Attached != nil {
		ch <- prometheus.MustNewConstMetric(nodeAttached, prometheus.GaugeValue, bool01(n.Attached()))
	}
}

// constHistogram is h as a Prometheus histogram.
func constHistogram(d *prometheus.Desc, h status.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.UpperS))
	for i, le := range h.UpperS {
		if i < len(h.Counts) {
			buckets[le] = h.Counts[i]
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.SumS, buckets, labels...)
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
