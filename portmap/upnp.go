package portmap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"
)

// What the SSDP search looks for (an IGD answers searches for its own
// version and lower ones; some answer only their own), and the services
// that map ports, most capable first.
var (
	igdDevices  = []string{"urn:schemas-upnp-org:device:InternetGatewayDevice:1", "urn:schemas-upnp-org:device:InternetGatewayDevice:2"}
	igdServices = []string{internetgateway2.URN_WANIPConnection_2, internetgateway2.URN_WANIPConnection_1, internetgateway2.URN_WANPPPConnection_1}
)

// UPnP error codes (IGD WANIPConnection v2 §2.4).
const (
	upnpConflict      = 718 // ConflictInMappingEntry
	upnpOnlyPermanent = 725 // OnlyPermanentLeasesSupported
)

// igdService is what WANIPConnection1, WANIPConnection2 and
// WANPPPConnection1 clients have in common.
type igdService interface {
	AddPortMappingCtx(ctx context.Context, remoteHost string, extPort uint16, proto string, intPort uint16, intClient string, enabled bool, desc string, lease uint32) error
	DeletePortMappingCtx(ctx context.Context, remoteHost string, extPort uint16, proto string) error
	GetExternalIPAddressCtx(ctx context.Context) (string, error)
}

// igdClient maps ports on a UPnP IGD (github.com/huin/goupnp).
type igdClient struct {
	svc   igdService
	urn   string
	loc   string // the root description's URL
	laddr netip.Addr
	desc  string
}

func (c *igdClient) protocol() Protocol { return UPnP }
func (c *igdClient) gateway() string    { return c.loc }
func (c *igdClient) local() netip.Addr  { return c.laddr }

func (c *igdClient) external(ctx context.Context) (netip.Addr, error) {
	s, err := c.svc.GetExternalIPAddressCtx(ctx)
	if err != nil {
		return netip.Addr{}, c.explain("GetExternalIPAddress", err)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.IsUnspecified() || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("UPnP IGD %s: no usable external address (%q): is it behind another NAT?", c.loc, s)
	}
	return a, nil
}

func (c *igdClient) add(ctx context.Context, internal, ext uint16, lifetime time.Duration) (grant, error) {
	ip, err := c.external(ctx)
	if err != nil {
		return grant{}, err
	}
	lease := uint32(min(lifetime/time.Second, 604800)) // IGDv2's longest lease, a week
	port, err := c.addPort(ctx, internal, ext, lease)
	if upnpCode(err) == upnpOnlyPermanent {
		lease = 0
		port, err = c.addPort(ctx, internal, ext, lease)
	}
	if err != nil {
		return grant{}, err
	}
	return grant{external: netip.AddrPortFrom(ip, port), lifetime: time.Duration(lease) * time.Second}, nil
}

// addPort maps ext, or another port when ext is someone else's: the one
// the IGD picks (v2) or, from v1 IGDs, a random one (three tries).
func (c *igdClient) addPort(ctx context.Context, internal, ext uint16, lease uint32) (uint16, error) {
	err := c.svc.AddPortMappingCtx(ctx, "", ext, "TCP", internal, c.laddr.String(), true, c.desc, lease)
	if upnpCode(err) != upnpConflict {
		return ext, c.explain("AddPortMapping", err)
	}
	if v2, ok := c.svc.(*internetgateway2.WANIPConnection2); ok {
		p, err := v2.AddAnyPortMappingCtx(ctx, "", ext, "TCP", internal, c.laddr.String(), true, c.desc, lease)
		return p, c.explain("AddAnyPortMapping", err)
	}
	for i := 0; i < 3 && upnpCode(err) == upnpConflict; i++ {
		p := uint16(1024 + rand.N(65535-1024))
		if err = c.svc.AddPortMappingCtx(ctx, "", p, "TCP", internal, c.laddr.String(), true, c.desc, lease); err == nil {
			return p, nil
		}
	}
	return 0, c.explain("AddPortMapping", err)
}

func (c *igdClient) remove(ctx context.Context, _, ext uint16) error {
	return c.explain("DeletePortMapping", c.svc.DeletePortMappingCtx(ctx, "", ext, "TCP"))
}

// explain names the IGD and the action, and the UPnP error if any; nil
// stays nil.
func (c *igdClient) explain(action string, err error) error {
	if err == nil {
		return nil
	}
	var f *soap.SOAPFaultError
	if errors.As(err, &f) && f.Detail.UPnPError.Errorcode != 0 {
		err = upnpError{f}
	}
	return fmt.Errorf("UPnP IGD %s: %s: %w", c.loc, action, err)
}

// upnpError says a SOAP fault's UPnP error in short.
type upnpError struct{ f *soap.SOAPFaultError }

func (e upnpError) Error() string {
	return fmt.Sprintf("UPnP error %d %s", e.f.Detail.UPnPError.Errorcode, e.f.Detail.UPnPError.ErrorDescription)
}

func (e upnpError) Unwrap() error { return e.f }

// upnpCode is the UPnP error code in err, or 0.
func upnpCode(err error) int {
	var f *soap.SOAPFaultError
	if errors.As(err, &f) {
		return f.Detail.UPnPError.Errorcode
	}
	return 0
}
