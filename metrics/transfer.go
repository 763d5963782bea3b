package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/status"
)

// Transfers is a transfer service's collector (gridlink serve): it reads
// Counters at every scrape.
type Transfers struct {
	Counters func() status.TransferCounters // xfer's Server.Counters
}

var (
	xferSessions = desc("transfer", "sessions_total", "Transfer sessions that ended, by operation (get: from this service; put: to it; push: from it to another service) and outcome (ok, failed).", "op", "outcome")
	xferFiles    = desc("transfer", "files_total", "Files stored and verified by the transfer sessions that ended, by operation and outcome.", "op", "outcome")
	xferFailed   = desc("transfer", "failed_files_total", "Entries the transfer sessions that ended did not store, by operation and outcome.", "op", "outcome")
	xferSent     = desc("transfer", "sent_bytes_total", "File data the transfer sessions that ended sent over their links, by operation and outcome.", "op", "outcome")
	xferMoved    = desc("transfer", "moved_bytes_total", "File data transfer sessions moved, counted as it goes (get: as blocks are sent; put: as each file is stored), running sessions included; push: not counted here.", "op")
	xferKept     = desc("transfer", "kept_bytes_total", "Bytes the receivers of the transfer sessions that ended already had and kept (resume), by operation and outcome.", "op", "outcome")
)

// Describe sends the service's metric descriptions.
func (x *Transfers) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{xferSessions, xferFiles, xferFailed, xferSent, xferKept, xferMoved} {
		ch <- d
	}
}

// Collect reads the service's counters and sends them.
func (x *Transfers) Collect(ch chan<- prometheus.Metric) {
	c := x.Counters()
	for _, m := range c.Moved {
		ch <- prometheus.MustNewConstMetric(xferMoved, prometheus.CounterValue, float64(m.Bytes), m.Op)
	}
	for _, o := range c.Ops {
		ch <- prometheus.MustNewConstMetric(xferSessions, prometheus.CounterValue, float64(o.Sessions), o.Op, o.Outcome)
		ch <- prometheus.MustNewConstMetric(xferFiles, prometheus.CounterValue, float64(o.Files), o.Op, o.Outcome)
		ch <- prometheus.MustNewConstMetric(xferFailed, prometheus.CounterValue, float64(o.Failed), o.Op, o.Outcome)
		ch <- prometheus.MustNewConstMetric(xferSent, prometheus.CounterValue, float64(o.SentBytes), o.Op, o.Outcome)
		ch <- prometheus.MustNewConstMetric(xferKept, prometheus.CounterValue, float64(o.KeptBytes), o.Op, o.Outcome)
	}
}
