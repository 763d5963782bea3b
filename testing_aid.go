//go:build gridlinktesting

package gridlink

// TestingUnchecked is a testing aid, only in a binary built with -tags
// gridlinktesting (no shipped binary has it): c's Cert or Proxy is then
// presented as it is instead of refused up front when its chain is bad
// (an expired, revoked or tampered chain, a forged proxy), judged by
// CA's trust, or, without CA, by no one: a hub or node that admits
// anyone. The lab's outsider tests play with it.
func TestingUnchecked(c *Credentials) { c.unchecked = true }
