package lab_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// dnsAsk asks the name server at server (a node's, 127.0.0.153:53) in
// host h for name's A records over UDP, as glibc's resolver would, and
// says what came back: the rcode and the addresses, or why nothing did.
// For failure reports: getent says only "not found".
func dnsAsk(h *topology.Host, server, name string) string {
	q, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return err.Error()
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x6c61, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: q, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, err := b.Finish()
	if err != nil {
		return err.Error()
	}
	var c net.Conn
	if err := netns.Do(lab.HostNS(h), func() (err error) { c, err = net.Dial("udp", server); return err }); err != nil {
		return fmt.Sprintf("dial %s: %v", server, err)
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return err.Error()
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Sprintf("no answer from %s: %v", server, err)
	}
	var p dnsmessage.Parser
	hd, err := p.Start(buf[:n])
	if err != nil {
		return fmt.Sprintf("unreadable answer: %v", err)
	}
	p.SkipAllQuestions()
	var addrs []string
	for {
		r, err := p.Answer()
		if err != nil {
			break
		}
		if a, ok := r.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(a.A).String())
		}
	}
	return fmt.Sprintf("%v %v in %v", hd.RCode, addrs, time.Since(start).Round(time.Millisecond))
}
