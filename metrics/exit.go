package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/status"
)

// The exit service's series (Node.ExitCounters): exits opened and failed,
// refusals by reason, and the bytes exits carried, added as each ends.
var (
	exitOpened  = desc("node", "exits_opened_total", "Exits this node's exit service opened for members (the destination connected).")
	exitFailed  = desc("node", "exits_failed_total", "Exits whose destination could not be resolved or connected.")
	exitRefused = desc("node", "exits_refused_total", "Exits refused, by reason (bad_request, loopback, link_local, unspecified, multicast, broadcast, own_address, private, port, per_member).", "reason")
	exitBytes   = desc("node", "exit_bytes_total", "Bytes exits carried, by direction (sent: from members to their destinations; received: back), added as each exit ends.", "direction")
)

func describeExit(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{exitOpened, exitFailed, exitRefused, exitBytes} {
		ch <- d
	}
}

// collectExit sends the exit service's counts.
func collectExit(ch chan<- prometheus.Metric, c status.ExitCounters) {
	ch <- prometheus.MustNewConstMetric(exitOpened, prometheus.CounterValue, float64(c.Opened))
	ch <- prometheus.MustNewConstMetric(exitFailed, prometheus.CounterValue, float64(c.Failed))
	for _, r := range c.Refused {
		ch <- prometheus.MustNewConstMetric(exitRefused, prometheus.CounterValue, float64(r.Count), r.Reason)
	}
	ch <- prometheus.MustNewConstMetric(exitBytes, prometheus.CounterValue, float64(c.SentBytes), "sent")
	ch <- prometheus.MustNewConstMetric(exitBytes, prometheus.CounterValue, float64(c.ReceivedBytes), "received")
}
