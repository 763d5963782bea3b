package peercred

import (
	"encoding/binary"
	"fmt"
	"net"
)

// The kernel's socket table as sock_diag gives it (linux/inet_diag.h),
// for one exact lookup of a TCP socket.
//
// The request, struct inet_diag_req_v2 (56 bytes):
//
//	family u8, protocol u8 (IPPROTO_TCP), ext u8 (0), pad u8,
//	states u32 (host order; all),
//	id: sport be16, dport be16, src [16]byte, dst [16]byte (IPv4 in the
//	    first 4 bytes), if u32, cookie [2]u32 (INET_DIAG_NOCOOKIE: any)
//
// The answer, struct inet_diag_msg (72 bytes, attributes after it are
// ignored):
//
//	family u8, state u8, timer u8, retrans u8,
//	id (48 bytes, as above),
//	expires u32, rqueue u32, wqueue u32, uid u32, inode u32 (host order)
const (
	diagIDLen  = 48
	diagReqLen = 8 + diagIDLen
	diagMsgLen = 4 + diagIDLen + 20
	ipprotoTCP = 6
	allStates  = 0xffffffff
	noCookie   = 0xffffffff
	afINET     = 2
	offUID     = 4 + diagIDLen + 12
	offInode   = offUID + 4
)

// diagReq is an inet_diag_req_v2 for the TCP socket from local to remote.
type diagReq struct {
	family        uint8
	local, remote *net.TCPAddr
}

func (r diagReq) Len() int { return diagReqLen }

func (r diagReq) Serialize() []byte {
	b := make([]byte, diagReqLen)
	b[0], b[1] = r.family, ipprotoTCP
	binary.NativeEndian.PutUint32(b[4:], allStates)
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(r.local.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(r.remote.Port))
	putIP(id[4:20], r.family, r.local.IP)
	putIP(id[20:36], r.family, r.remote.IP)
	binary.NativeEndian.PutUint32(id[40:], noCookie)
	binary.NativeEndian.PutUint32(id[44:], noCookie)
	return b
}

func putIP(dst []byte, family uint8, ip net.IP) {
	if family == afINET {
		copy(dst, ip.To4())
		return
	}
	copy(dst, ip.To16())
}

// diagMsg is what peercred reads of an inet_diag_msg.
type diagMsg struct {
	sport, dport uint16
	src, dst     net.IP
	uid, inode   uint32
}

// parseDiagMsg reads an inet_diag_msg.
func parseDiagMsg(b []byte) (diagMsg, error) {
	if len(b) < diagMsgLen {
		return diagMsg{}, fmt.Errorf("an inet_diag_msg of %d bytes, want at least %d", len(b), diagMsgLen)
	}
	id := b[4:]
	m := diagMsg{
		sport: binary.BigEndian.Uint16(id[0:]),
		dport: binary.BigEndian.Uint16(id[2:]),
		uid:   binary.NativeEndian.Uint32(b[offUID:]),
		inode: binary.NativeEndian.Uint32(b[offInode:]),
	}
	if b[0] == afINET {
		m.src, m.dst = net.IP(append([]byte(nil), id[4:8]...)), net.IP(append([]byte(nil), id[20:24]...))
	} else {
		m.src, m.dst = net.IP(append([]byte(nil), id[4:20]...)), net.IP(append([]byte(nil), id[20:36]...))
	}
	return m, nil
}
