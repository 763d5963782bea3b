package socks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// Wire format (RFC 1928, RFC 1929). Every number is one byte unless said.
//
//	greeting  VER=5 NMETHODS METHODS[NMETHODS]          client → server
//	choice    VER=5 METHOD                              server → client
//	auth      VER=1 ULEN UNAME[ULEN] PLEN PASSWD[PLEN]  client → server (RFC 1929)
//	status    VER=1 STATUS (0 success)                  server → client
//	request   VER=5 CMD RSV=0 ATYP DST.ADDR DST.PORT(2, big-endian)
//	reply     VER=5 REP RSV=0 ATYP BND.ADDR BND.PORT(2, big-endian)
//
// ADDR by ATYP: 1 IPv4 (4 bytes), 3 domain name (a length byte of 1-255,
// then the name), 4 IPv6 (16 bytes). BIND sends two replies: the first
// with the address the peer should connect to, the second once it has,
// with the peer's address.
const (
	version     = 5
	authVersion = 1

	MethodNone     = 0x00 // no authentication
	MethodPassword = 0x02 // username/password (RFC 1929)
	MethodNoneOK   = 0xFF // no acceptable method (in the server's choice)

	CmdConnect   = 0x01
	CmdBind      = 0x02
	CmdAssociate = 0x03 // UDP ASSOCIATE: not supported (reply 0x07)

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// Reply codes (REP).
const (
	ReplySucceeded          = 0x00
	ReplyGeneralFailure     = 0x01
	ReplyNotAllowed         = 0x02 // connection not allowed by ruleset
	ReplyNetworkUnreachable = 0x03
	ReplyHostUnreachable    = 0x04 // also: an unknown overlay name
	ReplyRefused            = 0x05 // nothing listens on the port
	ReplyTTLExpired         = 0x06 // used for timeouts
	ReplyCmdNotSupported    = 0x07
	ReplyAtypNotSupported   = 0x08
)

// Addr is a SOCKS address: a domain name or an IP address, and a port.
type Addr struct {
	Host string // domain name, or IP address text
	IP   netip.Addr
	Port uint16
}

// IsName reports whether the address is a domain name.
func (a Addr) IsName() bool { return !a.IP.IsValid() }

func (a Addr) String() string {
	if a.IP.IsValid() {
		return netip.AddrPortFrom(a.IP, a.Port).String()
	}
	return a.Host + ":" + strconv.Itoa(int(a.Port))
}

// Request is a client's request.
type Request struct {
	Cmd  byte
	Addr Addr
}

// SOCKS4 (and 4a): a client that speaks it gets the SOCKS4 reply "request
// rejected", 8 bytes: VN=0 CD=0x5B DSTPORT(2)=0 DSTIP(4)=0. Only SOCKS5 is
// served.
const (
	socks4Version  = 4
	Socks4Rejected = 0x5B
)

// errSocks4 is the greeting of a SOCKS4 client.
var errSocks4 = errors.New("socks: a SOCKS4 request: only SOCKS5 is served (answered 0x5B, request rejected)")

// errAtyp is the decoding error of an unknown address type: the server
// answers it with ReplyAtypNotSupported, other bad requests with a general
// failure.
var errAtyp = errors.New("socks: address type not supported")

// readGreeting reads the client's greeting and returns its methods.
func readGreeting(r io.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("socks: greeting: %w", err)
	}
	if h[0] == socks4Version {
		return nil, errSocks4
	}
	if h[0] != version {
		return nil, fmt.Errorf("socks: greeting: version %d, want 5 (is this a SOCKS5 client?)", h[0])
	}
	if h[1] == 0 {
		return nil, errors.New("socks: greeting offers no methods")
	}
	m := make([]byte, h[1])
	if _, err := io.ReadFull(r, m); err != nil {
		return nil, fmt.Errorf("socks: greeting: %w", err)
	}
	return m, nil
}

// readAuth reads a username/password subnegotiation.
func readAuth(r io.Reader) (user, pass string, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", "", fmt.Errorf("socks: auth: %w", err)
	}
	if h[0] != authVersion {
		return "", "", fmt.Errorf("socks: auth: version %d, want 1", h[0])
	}
	u := make([]byte, int(h[1])+1)
	if _, err := io.ReadFull(r, u); err != nil {
		return "", "", fmt.Errorf("socks: auth: %w", err)
	}
	p := make([]byte, u[len(u)-1])
	if _, err := io.ReadFull(r, p); err != nil {
		return "", "", fmt.Errorf("socks: auth: %w", err)
	}
	return string(u[:len(u)-1]), string(p), nil
}

// readRequest reads a request. An error wrapping errAtyp means the
// address type was unknown.
func readRequest(r io.Reader) (Request, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Request{}, fmt.Errorf("socks: request: %w", err)
	}
	if h[0] != version {
		return Request{}, fmt.Errorf("socks: request: version %d, want 5", h[0])
	}
	if h[2] != 0 {
		return Request{}, fmt.Errorf("socks: request: reserved byte %#x, want 0", h[2])
	}
	req := Request{Cmd: h[1]}
	a, err := readAddr(r, h[3])
	if err != nil {
		return Request{}, err
	}
	req.Addr = a
	return req, nil
}

func readAddr(r io.Reader, atyp byte) (Addr, error) {
	var a Addr
	switch atyp {
	case atypIPv4, atypIPv6:
		b := make([]byte, 4)
		if atyp == atypIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(r, b); err != nil {
			return a, fmt.Errorf("socks: request address: %w", err)
		}
		a.IP, _ = netip.AddrFromSlice(b)
		a.Host = a.IP.String()
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return a, fmt.Errorf("socks: request address: %w", err)
		}
		if n[0] == 0 {
			return a, errors.New("socks: request: empty domain name")
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return a, fmt.Errorf("socks: request address: %w", err)
		}
		for _, c := range b {
			if c <= ' ' || c >= 0x7f {
				return a, fmt.Errorf("socks: request: domain name %q has a byte %#x", b, c)
			}
		}
		a.Host = string(b)
	default:
		return a, fmt.Errorf("%w: %#x", errAtyp, atyp)
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return a, fmt.Errorf("socks: request port: %w", err)
	}
	a.Port = binary.BigEndian.Uint16(p[:])
	return a, nil
}

// appendReply encodes a reply with address a (the zero Addr: 0.0.0.0:0).
func appendReply(b []byte, rep byte, a Addr) []byte {
	b = append(b, version, rep, 0)
	switch {
	case a.IP.Is4():
		b = append(b, atypIPv4)
		b = append(b, a.IP.AsSlice()...)
	case a.IP.Is6():
		b = append(b, atypIPv6)
		b = append(b, a.IP.AsSlice()...)
	case a.Host != "" && len(a.Host) <= 255:
		b = append(b, atypDomain, byte(len(a.Host)))
		b = append(b, a.Host...)
	default:
		b = append(b, atypIPv4, 0, 0, 0, 0)
	}
	return binary.BigEndian.AppendUint16(b, a.Port)
}
