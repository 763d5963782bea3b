package tun

import "fmt"

// NotTUNError is FromFile's refusal of a descriptor that is not a TUN
// device: what it is instead, in words.
type NotTUNError struct {
	Reason string
}

func (e *NotTUNError) Error() string {
	return "tun: the handed descriptor is not a TUN device: " + e.Reason
}

// tunMisc is /dev/net/tun's device number: misc (major 10), minor 200
// (linux/miscdevice.h TUN_MINOR).
const (
	tunMajor = 10
	tunMinor = 200
)

func notTUN(format string, args ...any) error {
	return &NotTUNError{Reason: fmt.Sprintf(format, args...)}
}
