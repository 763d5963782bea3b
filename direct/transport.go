package direct

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Transport dials a raw byte stream (no TLS) for a transport spec:
//
//	HOST:PORT                                         plain TCP
//	ssh://[USER@]SSHHOST[:SSHPORT]/[TARGETHOST:]PORT  a direct-tcpip channel through an sshd
//
// In the ssh form SSHHOST may be an alias of the ssh config file, which
// may give its HostName, User, Port and IdentityFile; TARGETHOST defaults
// to 127.0.0.1 as seen by the sshd. Setup is bounded by Timeout (plain) or
// SSH.Timeout.
// Hubs use it to link to other hubs, then run their own handshake over it.
func (d *Dialer) Transport(ctx context.Context, spec string) (net.Conn, error) {
	if !strings.HasPrefix(spec, "ssh://") {
		ctx, cancel := context.WithTimeout(ctx, d.timeout())
		defer cancel()
		if _, _, err := splitPort(spec); err != nil {
			return nil, fmt.Errorf("direct: transport %q: %v (want HOST:PORT or ssh://[USER@]HOST[:PORT]/[HOST:]PORT)", clip(spec), err)
		}
		c, err := ConnectTCP(ctx, d.DialContext, spec) // hubs may be flooded: race SYNs
		if err != nil {
			return nil, fmt.Errorf("direct: transport %s: %w", spec, err)
		}
		return c, nil
	}
	s, err := parseTransportSpec(spec)
	if err != nil {
		return nil, err
	}
	if d.SSH == nil {
		return nil, fmt.Errorf("direct: transport %s: ssh is not configured (Dialer.SSH is nil)", spec)
	}
	ctx, cancel := context.WithTimeout(ctx, d.SSH.timeout())
	defer cancel()
	c, err := d.sshTransport(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("direct: transport %s: %w", spec, err)
	}
	return c, nil
}

// transportSpec is a parsed ssh:// transport spec.
type transportSpec struct {
	user   string // "" = from the ssh config, SSHConfig.User or the local user
	host   string // alias or address of the sshd, without brackets
	port   string // "" = from the ssh config, or 22
	target string // HOST:PORT the sshd connects to
}

func (s transportSpec) String() string {
	var b strings.Builder
	b.WriteString("ssh://")
	if s.user != "" {
		b.WriteString(s.user + "@")
	}
	if s.port != "" {
		b.WriteString(net.JoinHostPort(s.host, s.port))
	} else if strings.Contains(s.host, ":") {
		b.WriteString("[" + s.host + "]")
	} else {
		b.WriteString(s.host)
	}
	b.WriteString("/" + s.target)
	return b.String()
}

// parseTransportSpec parses "ssh://[USER@]SSHHOST[:SSHPORT]/[TARGETHOST:]PORT".
func parseTransportSpec(spec string) (transportSpec, error) {
	var s transportSpec
	bad := func(why string) (transportSpec, error) {
		return transportSpec{}, fmt.Errorf("direct: bad transport spec %q: %s (want ssh://[USER@]SSHHOST[:SSHPORT]/[TARGETHOST:]PORT)", clip(spec), why)
	}
	rest, ok := strings.CutPrefix(spec, "ssh://")
	if !ok {
		return bad("not ssh://")
	}
	authority, target, ok := strings.Cut(rest, "/")
	if !ok {
		return bad("no /PORT")
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		s.user, authority = authority[:i], authority[i+1:]
		if s.user == "" || strings.ContainsAny(s.user, "@/: \t\r\n") {
			return bad("bad user")
		}
	}
	switch {
	case strings.HasPrefix(authority, "["):
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return bad("missing ']'")
		}
		s.host = authority[1:end]
		if _, err := netip.ParseAddr(s.host); err != nil {
			return bad("bad IP address in brackets")
		}
		if p := authority[end+1:]; p != "" {
			if !strings.HasPrefix(p, ":") {
				return bad("junk after ']'")
			}
			s.port = p[1:]
		}
	case strings.Contains(authority, ":"):
		s.host, s.port, _ = strings.Cut(authority, ":")
	default:
		s.host = authority
	}
	if !validHost(s.host) {
		return bad("bad ssh host")
	}
	if s.port != "" {
		if _, err := parsePort(s.port); err != nil {
			return bad("ssh port: " + err.Error())
		}
	}
	if !strings.Contains(target, ":") {
		target = "127.0.0.1:" + target
	}
	host, _, err := splitPort(target)
	if err != nil {
		return bad("target: " + err.Error())
	}
	if !validHost(host) {
		return bad("bad target host")
	}
	s.target = target
	return s, nil
}

// splitPort splits HOST:PORT and checks the port.
func splitPort(hostport string) (string, uint16, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		return "", 0, errors.New("no host")
	}
	p, err := parsePort(port)
	return host, p, err
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 || s[0] == '+' {
		return 0, fmt.Errorf("port %q is not 1-65535", clip(s))
	}
	return uint16(p), nil
}

// validHost accepts IP addresses and host names (letters, digits, '-',
// '_' and '.').
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
