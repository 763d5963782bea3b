//go:build !linux

package direct

// linkTypes is unknown off Linux: the interface flags decide alone.
func linkTypes() map[int]uint16 { return nil }
