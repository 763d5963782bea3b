package direct

import (
	"syscall"
	"unsafe"
)

// linkTypes maps the interface indexes of the calling thread's network
// namespace to their link types (ARPHRD_*), read by netlink (RTM_GETLINK,
// as net.Interfaces does, which drops the type); nil when it cannot.
func linkTypes() map[int]uint16 {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return nil
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil
	}
	types := map[int]uint16{}
	for _, m := range msgs {
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		ifi := (*syscall.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
		types[int(ifi.Index)] = ifi.Type
	}
	return types
}
