package portmap

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/httpu"
	"github.com/huin/goupnp/ssdp"
)

// lanHTTP talks to IGDs: never through a proxy, whatever the environment.
var lanHTTP = &http.Client{Transport: &http.Transport{
	Proxy:                 nil,
	DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	ResponseHeaderTimeout: 10 * time.Second,
	MaxIdleConnsPerHost:   1,
	IdleConnTimeout:       30 * time.Second,
}}

// discoverIGD searches the LAN for an IGD by SSDP (which lasts the whole
// timeout, at least 1 s: SSDP's wait is in whole seconds) and returns a
// client of the first one that tells its external address.
func discoverIGD(ctx context.Context, cfg Config) (client, error) {
	wait := max(cfg.timeout(), 1100*time.Millisecond)
	found, err := ssdpSearch(ctx, wait)
	if err != nil {
		return nil, fmt.Errorf("UPnP: %w", err)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("UPnP: no IGD answered on the LAN within %v", wait.Round(100*time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.timeout())
	defer cancel()
	var errs []error
	for _, f := range found {
		c, err := igdAt(ctx, f.loc, f.laddr, cfg.description())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

type ssdpFound struct {
	loc   *url.URL
	laddr netip.Addr // the local address the answer came to
}

// ssdpSearch multicasts M-SEARCHes for IGDs from every IPv4 multicast
// interface and collects the distinct root description URLs answered.
func ssdpSearch(ctx context.Context, wait time.Duration) ([]ssdpFound, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagMulticast == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := ifi.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				addrs = append(addrs, p.Addr())
			}
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("no IPv4 multicast interface to search for an IGD on")
	}
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		mu    sync.Mutex
		found []ssdpFound
		seen  = map[string]bool{}
		wg    sync.WaitGroup
		errs  []error
	)
	for _, st := range igdDevices {
		var clients []httpu.ClientInterfaceCtx
		for _, a := range addrs {
			c, err := httpu.NewHTTPUClientAddr(a.String())
			if err != nil {
				return nil, err
			}
			defer c.Close()
			clients = append(clients, c)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := ssdp.RawSearch(sctx, httpu.NewMultiClientCtx(clients), st, 2)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			for _, r := range rs {
				loc, err := r.Location()
				if err != nil || seen[loc.String()] {
					continue
				}
				seen[loc.String()] = true
				la, _ := netip.ParseAddr(r.Header.Get(httpu.LocalAddressHeader))
				found = append(found, ssdpFound{loc: loc, laddr: la})
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(found) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return found, nil
}

// igdAt reads the IGD's description at loc and returns a client of its
// most capable port mapping service that tells its external address.
func igdAt(ctx context.Context, loc *url.URL, laddr netip.Addr, desc string) (*igdClient, error) {
	root, err := fetchRoot(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("UPnP IGD %s: %w", loc, err)
	}
	if !laddr.IsValid() {
		if laddr, err = localAddrTo(loc); err != nil {
			return nil, fmt.Errorf("UPnP IGD %s: %w", loc, err)
		}
	}
	for _, ref := range mappingServices(root, loc) {
		gsc := goupnp.ServiceClient{SOAPClient: ref.srv.NewSOAPClient(), RootDevice: root, Location: loc, Service: ref.srv}
		gsc.SOAPClient.HTTPClient = *lanHTTP
		c := &igdClient{urn: ref.urn, loc: loc.String(), laddr: laddr, desc: desc}
		switch ref.urn {
		case internetgateway2.URN_WANIPConnection_2:
			c.svc = &internetgateway2.WANIPConnection2{ServiceClient: gsc}
		case internetgateway2.URN_WANIPConnection_1:
			c.svc = &internetgateway2.WANIPConnection1{ServiceClient: gsc}
		default:
			c.svc = &internetgateway2.WANPPPConnection1{ServiceClient: gsc}
		}
		if _, err := c.external(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("UPnP IGD %s (%s): no port mapping service of its own (WANIPConnection or WANPPPConnection)", loc, root.Device.FriendlyName)
}

type serviceRef struct {
	urn string
	srv *goupnp.Service
}

// mappingServices lists root's port mapping services, most capable first,
// leaving out those controlled elsewhere than on loc's host: an IGD maps
// ports on itself, and SOAP requests go nowhere else.
func mappingServices(root *goupnp.RootDevice, loc *url.URL) []serviceRef {
	var refs []serviceRef
	for _, urn := range igdServices {
		for _, srv := range root.Device.FindService(urn) {
			if srv.ControlURL.URL.Hostname() == loc.Hostname() && srv.ControlURL.URL.Scheme == "http" {
				refs = append(refs, serviceRef{urn, srv})
			}
		}
	}
	return refs
}

// fetchRoot GETs and decodes a device description.
func fetchRoot(ctx context.Context, loc *url.URL) (*goupnp.RootDevice, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := lanHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("description: HTTP %s", resp.Status)
	}
	return decodeRoot(io.LimitReader(resp.Body, 1<<20), loc)
}

// decodeRoot decodes a root device description fetched from loc.
func decodeRoot(r io.Reader, loc *url.URL) (*goupnp.RootDevice, error) {
	root := new(goupnp.RootDevice)
	d := xml.NewDecoder(r)
	d.DefaultSpace = goupnp.DeviceXMLNamespace
	d.CharsetReader = goupnp.CharsetReaderDefault
	if err := d.Decode(root); err != nil {
		return nil, fmt.Errorf("description: %w", err)
	}
	base := loc
	if root.URLBaseStr != "" {
		u, err := url.Parse(root.URLBaseStr)
		if err != nil {
			return nil, fmt.Errorf("description: URLBase: %w", err)
		}
		base = u
	}
	root.SetURLBase(base)
	return root, nil
}

// localAddrTo is the local address that connections to loc leave from.
func localAddrTo(loc *url.URL) (netip.Addr, error) {
	ip, err := netip.ParseAddr(loc.Hostname())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("description URL host %q is no IP address", loc.Hostname())
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}
