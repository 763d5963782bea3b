package vconn

import (
	"fmt"
	"strconv"
)

// Requests carried in the direct layer's handshake (as an ALPN suffix, see
// package direct): what a direct connection is for.
//
//	c<port>   a connection to a virtual port of the listening node, e.g. "c7000"
//	r<token>  a reverse setup calling back: token in lower-case hex
//	s         a spare: the port follows after the handshake (spare.go)
//	x<token>  a spliced connection: token in lower-case hex (splice.go)
//
// After the handshake the dialling side of a virtual connection sends one
// commit byte, commitByte, once it has chosen the connection: only then does
// the accepting side hand it to Accept, so the losers of a method race are
// never seen by the application.
const commitByte = 0x01

type request struct {
	spare   bool
	splice  bool
	reverse bool
	port    uint16
	token   uint64
}

func (r request) String() string {
	if r.spare {
		return "s"
	}
	if r.reverse {
		return "r" + strconv.FormatUint(r.token, 16)
	}
	if r.splice {
		return "x" + strconv.FormatUint(r.token, 16)
	}
	return "c" + strconv.Itoa(int(r.port))
}

func parseRequest(s string) (request, error) {
	if s == "s" {
		return request{spare: true}, nil
	}
	if len(s) < 2 || len(s) > 17 {
		return request{}, fmt.Errorf("vconn: bad request %q", s)
	}
	switch s[0] {
	case 'c':
		p, err := strconv.ParseUint(s[1:], 10, 16)
		if err != nil || p == 0 || s[1] == '0' {
			return request{}, fmt.Errorf("vconn: bad port in request %q", s)
		}
		return request{port: uint16(p)}, nil
	case 'r', 'x':
		t, err := strconv.ParseUint(s[1:], 16, 64)
		if err != nil || s[1] == '+' || strconv.FormatUint(t, 16) != s[1:] {
			return request{}, fmt.Errorf("vconn: bad token in request %q", s)
		}
		return request{reverse: s[0] == 'r', splice: s[0] == 'x', token: t}, nil
	}
	return request{}, fmt.Errorf("vconn: unknown request %q", s)
}
