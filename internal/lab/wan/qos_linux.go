//go:build linux

package wan

import (
	"encoding/binary"
	"fmt"
	"os"
)

// cpuLatencyQoS holds a PM QoS request for zero CPU wake-up latency
// (/dev/cpu_dma_latency) for as long as the file stays open. Idle CPUs
// then poll instead of halting: on a virtual machine that cuts the time
// to wake a thread for a packet or a timer from around 100 µs (with
// millisecond outliers) to a few µs, at the price of idle vCPUs that look
// busy to the host. The request is the whole machine's, not the
// emulator's, which is why it is opt-in (Config.CPULatencyQoS).
func cpuLatencyQoS() (*os.File, error) {
	f, err := os.OpenFile("/dev/cpu_dma_latency", os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("wan: CPU latency QoS: %w", err)
	}
	var zero [4]byte
	binary.NativeEndian.PutUint32(zero[:], 0)
	if _, err := f.Write(zero[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("wan: CPU latency QoS: %w", err)
	}
	return f, nil
}
