// Package lab builds and tears down gridlab, the emulated grid: one Linux
// network namespace per host and site gateway, bridges for site networks,
// nftables rules for firewalls and NATs, and the wide-area links through the
// userspace emulator of package wan. It owns the lab's lifecycle and state
// (one lab at a time, recorded under StateDir); parsing topologies is package
// topology's, emulating links package wan's.
//
// Network safety: every address the lab uses is a documentation or private
// address assigned inside a lab namespace. The root namespace gets no lab
// address and no route into the lab, and no lab namespace has a route out.
package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topologies"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// StateDir holds the running lab's state; it is on tmpfs, like /run/netns,
// so a reboot clears both.
var StateDir = "/run/gridlab"

// State is what gridlab remembers about the running lab.
type State struct {
	Topology    string            `json:"topology"`
	File        string            `json:"file"`
	Source      string            `json:"source"`
	Params      map[string]string `json:"params,omitempty"`
	EmulatorPID int               `json:"emulator_pid"`
	Started     time.Time         `json:"started"`
	// Owner is the process whose lab it is (Options.Owner), with its
	// start time (clock ticks since boot, /proc/PID/stat) so that a
	// reused pid is not taken for it; 0 for a lab brought up by hand.
	Owner      int    `json:"owner,omitempty"`
	OwnerStart uint64 `json:"owner_start,omitempty"`
}

// ownerGone says whether the process that owns st's lab has ended.
func (st *State) ownerGone() bool {
	if st.Owner <= 0 {
		return false
	}
	start, ok := procStart(st.Owner)
	return !ok || start != st.OwnerStart
}

// procStart is a live process's start time in clock ticks since boot;
// false if there is no such process, or only its zombie.
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22: starttime
	return start, err == nil
}

func statePath() string { return filepath.Join(StateDir, "lab.json") }

// LogPath is the emulator's log file.
func LogPath() string { return filepath.Join(StateDir, "emulator.log") }

// Load finds a topology: a file when nameOrPath has a slash or ends in
// .topo, else a built-in one.
func Load(nameOrPath string, params map[string]string) (*topology.Topology, []byte, error) {
	if strings.ContainsRune(nameOrPath, '/') || strings.HasSuffix(nameOrPath, topologies.Ext) {
		src, err := os.ReadFile(nameOrPath)
		if err != nil {
			return nil, nil, fmt.Errorf("read topology: %w", err)
		}
		t, err := topology.Parse(nameOrPath, src, params)
		return t, src, err
	}
	src, ok := topologies.Source(nameOrPath)
	if !ok {
		return nil, nil, fmt.Errorf("no built-in topology %q (they are %s); for a file give a path ending in %s",
			nameOrPath, strings.Join(topologies.Names(), ", "), topologies.Ext)
	}
	t, err := topology.Parse(nameOrPath+topologies.Ext, src, params)
	return t, src, err
}

// ReadState returns the running lab's state, or nil if there is none.
func ReadState() (*State, error) {
	b, err := os.ReadFile(statePath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("lab state %s is corrupt (%v): run gridlab down", statePath(), err)
	}
	return &st, nil
}

func writeState(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath())
}

// Running returns the running lab's topology and state, or an error saying
// how to bring one up.
func Running() (*topology.Topology, *State, error) {
	st, err := ReadState()
	if err != nil {
		return nil, nil, err
	}
	if st == nil {
		return nil, nil, errors.New("no lab is up: run gridlab up TOPOLOGY (e.g. grid6)")
	}
	t, err := topology.Parse(st.File, []byte(st.Source), st.Params)
	if err != nil {
		return nil, nil, fmt.Errorf("lab state: %w", err)
	}
	if !alive(st.EmulatorPID) {
		return t, st, fmt.Errorf("lab %s is broken: its link emulator (pid %d) is gone (see %s); run gridlab down, then up", st.Topology, st.EmulatorPID, LogPath())
	}
	return t, st, nil
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// a zombie or a reused pid is not our emulator.
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmd, []byte(EmulateCmd))
}

// Leftovers lists what a previous run left: lab namespaces, state, and
// the files in /etc/netns that are the lab's (netnsetc.go).
func Leftovers() ([]string, error) {
	names, err := netns.List(Prefix)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(statePath()); err == nil {
		names = append(names, statePath())
	}
	return append(names, etcOurs(EtcNetns)...), nil
}
