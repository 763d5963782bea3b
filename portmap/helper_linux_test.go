package portmap_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	natpmp "github.com/jackpal/go-nat-pmp"

	"github.com/gridlink/gridlink/portmap"
)

// helperEnv holds the helper's arguments (JSON helperArgs) when the test
// binary runs as the helper.
const helperEnv = "GRIDLINK_PORTMAP_LAB_HELPER"

type helperArgs struct {
	Protocols []portmap.Protocol
	Port      uint16
	Lifetime  time.Duration
	Greet     string
	// RawNATPMP maps by one NAT-PMP request, without portmap, and never
	// renews: the control that shows the gateway lets leases run out.
	RawNATPMP bool
	Gateway   netip.Addr // for RawNATPMP
}

type helperStatus struct {
	Protocol           portmap.Protocol
	Gateway            string
	Internal, External netip.AddrPort
	Lifetime           time.Duration
	Expires            time.Time
	Renewals           int
	Err                string
	Text               string
}

type helperReply struct {
	Status  helperStatus
	Err     string
	Elapsed time.Duration
	Closed  bool
}

func statusOf(st portmap.Status) helperStatus {
	h := helperStatus{Protocol: st.Protocol, Gateway: st.Gateway, Internal: st.Internal, External: st.External,
		Lifetime: st.Lifetime, Expires: st.Expires, Renewals: st.Renewals, Text: st.String()}
	if st.Err != nil {
		h.Err = st.Err.Error()
	}
	return h
}

// runHelper serves a.Port (a greeting line, then an echo), maps it and
// reports the result as a JSON line on stdout; then answers the commands
// "status" and "close" read from stdin, and exits at its end.
func runHelper(spec string) int {
	var a helperArgs
	if err := json.Unmarshal([]byte(spec), &a); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", a.Port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.WriteString(c, a.Greet+"\n")
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	out := json.NewEncoder(os.Stdout)
	if a.RawNATPMP {
		return rawNATPMP(a, out)
	}
	start := time.Now()
	m, err := portmap.Map(context.Background(), portmap.Config{Protocols: a.Protocols, Lifetime: a.Lifetime}, a.Port)
	if err != nil {
		_ = out.Encode(helperReply{Err: err.Error(), Elapsed: time.Since(start)})
		return 0
	}
	defer m.Close()
	_ = out.Encode(helperReply{Status: statusOf(m.Status()), Elapsed: time.Since(start)})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "status":
			_ = out.Encode(helperReply{Status: statusOf(m.Status())})
		case "close":
			r := helperReply{Closed: true, Status: statusOf(m.Status())}
			if err := m.Close(); err != nil {
				r.Err = err.Error()
			}
			_ = out.Encode(r)
		}
	}
	return 0
}

func rawNATPMP(a helperArgs, out *json.Encoder) int {
	c := natpmp.NewClientWithTimeout(a.Gateway.AsSlice(), 2*time.Second)
	r, err := c.AddPortMapping("tcp", int(a.Port), int(a.Port), int(a.Lifetime/time.Second))
	if err != nil {
		_ = out.Encode(helperReply{Err: err.Error()})
		return 0
	}
	ext, err := c.GetExternalAddress()
	if err != nil {
		_ = out.Encode(helperReply{Err: err.Error()})
		return 0
	}
	_ = out.Encode(helperReply{Status: helperStatus{
		Protocol: portmap.NATPMP,
		External: netip.AddrPortFrom(netip.AddrFrom4(ext.ExternalIPAddress), r.MappedExternalPort),
		Lifetime: time.Duration(r.PortMappingLifetimeInSeconds) * time.Second,
	}})
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
