package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/lab/wan"
)

// WANConfig is the link emulator's configuration for topology t: one port
// per site gateway, one link per topology link.
func WANConfig(t *topology.Topology) wan.Config {
	var cfg wan.Config
	for _, s := range t.Sites {
		cfg.Ports = append(cfg.Ports, wan.Port{
			Name:     s.Name,
			NetNS:    "/run/netns/" + GatewayNS(s),
			Dev:      WANDev,
			Prefixes: s.WANPrefixes(),
		})
	}
	links := t.Links
	if t.Default != nil {
		links = append(links[:len(links):len(links)], t.Default)
	}
	for _, l := range links {
		cfg.Links = append(cfg.Links, wan.Link{A: l.A, B: l.B, Delay: l.Delay, Rate: l.Rate, Loss: l.Loss, Queue: l.Queue})
	}
	return cfg
}

// Emulate runs the link emulator of the lab recorded in the state file until
// SIGTERM or SIGINT. It writes "ready" to ready once every link carries
// packets. This is the body of the hidden `gridlab emulate` command.
func Emulate(statePath string, ready io.Writer) error {
	b, err := os.ReadFile(statePath)
	if err != nil {
		return err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("lab state %s: %w", statePath, err)
	}
	t, err := topology.Parse(st.File, []byte(st.Source), st.Params)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	cfg := WANConfig(t)
	// Precise delays need fast wake-ups: ask for zero CPU wake-up latency
	// while the lab runs (idle CPUs poll), unless GRIDLAB_CPU_QOS=0, and
	// go on without it where the machine refuses.
	cfg.CPULatencyQoS = os.Getenv("GRIDLAB_CPU_QOS") != "0"
	em, err := wan.Start(cfg)
	if err != nil && cfg.CPULatencyQoS {
		fmt.Fprintf(os.Stderr, "gridlab emulate: %v; delays will be less precise\n", err)
		cfg.CPULatencyQoS = false
		em, err = wan.Start(cfg)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(ready, "ready")
	s := <-sig
	fmt.Fprintf(os.Stderr, "gridlab emulate: %v: stopping\n", s)
	return em.Close()
}
