package portmap

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/huin/goupnp/dcps/internetgateway2"
)

// rootDesc is an IGD v2 description shaped like miniupnpd's: the
// WANIPConnection sits two devices down, its URLs relative to the
// description's.
const rootDesc = `<?xml version="1.0"?>
<root xmlns="urn:schemas-upnp-org:device-1-0" configId="1337">
<specVersion><major>1</major><minor>1</minor></specVersion>
<device>
 <deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:2</deviceType>
 <friendlyName>gridlab igd gateway</friendlyName>
 <UDN>uuid:d5198430-9b57-dc60-8c14-589f85cd29ad</UDN>
 <deviceList><device>
  <deviceType>urn:schemas-upnp-org:device:WANDevice:2</deviceType>
  <deviceList><device>
   <deviceType>urn:schemas-upnp-org:device:WANConnectionDevice:2</deviceType>
   <serviceList>
    <service>
     <serviceType>urn:schemas-upnp-org:service:WANPPPConnection:1</serviceType>
     <serviceId>urn:upnp-org:serviceId:WANPPPConn1</serviceId>
     <controlURL>http://192.0.2.66/ctl/PPPConn</controlURL>
    </service>
    <service>
     <serviceType>urn:schemas-upnp-org:service:WANIPConnection:2</serviceType>
     <serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId>
     <SCPDURL>/WANIPCn.xml</SCPDURL>
     <controlURL>/ctl/IPConn</controlURL>
     <eventSubURL>/evt/IPConn</eventSubURL>
    </service>
   </serviceList>
  </device></deviceList>
 </device></deviceList>
</device>
</root>`

func TestDecodeRoot(t *testing.T) {
	loc, _ := url.Parse("http://192.168.15.1:5000/rootDesc.xml")
	root, err := decodeRoot(strings.NewReader(rootDesc), loc)
	if err != nil {
		t.Fatal(err)
	}
	refs := mappingServices(root, loc)
	// the PPP service's control URL is on another host: left out.
	if len(refs) != 1 || refs[0].urn != internetgateway2.URN_WANIPConnection_2 {
		t.Fatalf("services %+v; want WANIPConnection:2 only", refs)
	}
	if got := refs[0].srv.ControlURL.URL.String(); got != "http://192.168.15.1:5000/ctl/IPConn" {
		t.Errorf("control URL %s", got)
	}
	if _, err := decodeRoot(strings.NewReader("<root><device>"), loc); err == nil {
		t.Error("truncated description decoded")
	}
}

// The description comes from any device on the LAN.
func FuzzDecodeRoot(f *testing.F) {
	f.Add([]byte(rootDesc))
	f.Add([]byte(`<root xmlns="urn:schemas-upnp-org:device-1-0"><URLBase>http://10.0.0.1:1/</URLBase><device></device></root>`))
	f.Add([]byte(`<root><URLBase>%zz</URLBase></root>`))
	loc, _ := url.Parse("http://192.168.15.1:5000/rootDesc.xml")
	f.Fuzz(func(t *testing.T, b []byte) {
		root, err := decodeRoot(bytes.NewReader(b), loc)
		if err != nil {
			return
		}
		for _, ref := range mappingServices(root, loc) {
			if u := ref.srv.ControlURL.URL; u.Hostname() != loc.Hostname() || u.Scheme != "http" {
				t.Fatalf("service %s controlled at %s, not on the IGD", ref.urn, &u)
			}
		}
	})
}
