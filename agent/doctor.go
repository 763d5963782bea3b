package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

func (a *Agent) doctor(w http.ResponseWriter, r *http.Request) {
	var req control.DoctorRequest
	if !decode(w, r, "doctor", &req) {
		return
	}
	d := status.Diagnosis{Node: a.node.Machine(), Host: a.hostFindings(), Credentials: a.credentials(), NAT: natInfo(a.node), PortMap: portMapInfo(a.node)}
	if req.Addr == "" {
		writeJSON(w, d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	pa, err := identity.ParseAddr(req.Addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if pa.Port == 0 {
		pa.Port = EchoPort
	}
	start := time.Now()
	target, err := a.node.Resolve(ctx, pa)
	d.LookupMS = ms(time.Since(start))
	if err != nil {
		d.Verdict = fmt.Sprintf("cannot find %s: %v", pa.Node, err)
		writeJSON(w, d)
		return
	}
	d.Target = &target
	methods := []vconn.Method{vconn.Direct, vconn.Reverse, vconn.Splice, vconn.Routed}
	d.Methods = make([]status.MethodCheck, len(methods))
	errs := make([]error, len(methods))
	var wg sync.WaitGroup
	for i, m := range methods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, mcancel := context.WithTimeout(ctx, 5*time.Second)
			defer mcancel()
			el, err := a.node.Try(mctx, m, target, pa.Port)
			c := status.MethodCheck{Method: string(m), OK: err == nil, MS: ms(el)}
			if err != nil {
				c.Error = err.Error()
			}
			if me := (*vconn.MethodError)(nil); errors.As(err, &me) {
				c.End = me.End.String()
				if me.Cause != nil {
					c.Cause = me.Cause.Error()
				}
			}
			d.Methods[i], errs[i] = c, err
		}()
	}
	wg.Wait()
	// the facts after the tries: a splice may have classified this host's
	// NAT meanwhile.
	facts := a.node.Facts(target)
	for i, m := range methods {
		d.Methods[i].Why = vconn.Explain(m, errs[i], facts)
	}
	d.Verdict = fmt.Sprintf("no method reaches %s", target)
	for _, c := range d.Methods {
		if c.OK {
			d.Verdict = fmt.Sprintf("%s is reached by %s (the most direct method that works)", target, c.Method)
			break
		}
	}
	writeJSON(w, d)
}

// hostFindings describes this host's connectivity in plain words.
func (a *Agent) hostFindings() []string {
	m := a.node.Machine()
	// a port mapping's endpoint is the gateway's address, not this host's.
	mapped := a.node.PortMap().Advertised
	m.Addrs = slices.DeleteFunc(slices.Clone(m.Addrs), func(ap netip.AddrPort) bool { return ap == mapped })
	var out, pub, priv []string
	for _, ap := range m.Addrs {
		if ap.Addr().IsPrivate() {
			priv = append(priv, ap.Addr().String())
		} else {
			pub = append(pub, ap.Addr().String())
		}
	}
	switch {
	case len(pub) > 0 && len(priv) > 0:
		out = append(out, fmt.Sprintf("multi-homed: public %s and private %s", strings.Join(pub, ", "), strings.Join(priv, ", ")))
	case len(pub) > 0:
		out = append(out, "public address "+strings.Join(pub, ", "))
	case len(priv) > 0:
		out = append(out, "private addresses only: "+strings.Join(priv, ", "))
	}
	if !vconn.HasDefaultRoute() {
		out = append(out, "no default route: this host is on a non-routed network and reaches nothing beyond its own networks; other sites reach it only through the hubs")
	}
	s := a.node.Session()
	if s == nil {
		return append(out, "not attached to a hub: only direct connections are possible")
	}
	h := s.Hub()
	out = append(out, fmt.Sprintf("attached to hub %s (%s)", h.Name, h.ID.Short()))
	obs := s.Observed()
	if obs.IsValid() {
		local := false
		for _, ap := range m.Addrs {
			if ap.Addr() == obs.Addr() {
				local = true
			}
		}
		if !local && !obs.Addr().IsLoopback() {
			out = append(out, fmt.Sprintf("the hub sees this host as %s, an address it does not have: it is behind a NAT (or the hub is reached through a proxy or ssh tunnel)", obs.Addr()))
		}
	}
	return out
}
