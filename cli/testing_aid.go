//go:build gridlinktesting

package cli

import "github.com/gridlink/gridlink"

// testingAid says whether this binary has the hidden testing aid
// --testing-unchecked-cert: only one built with -tags gridlinktesting
// (the lab's outsider tests build their own); no shipped binary has it.
const testingAid = true

// uncheck marks c unchecked (--testing-unchecked-cert).
func uncheck(c *gridlink.Credentials) { gridlink.TestingUnchecked(c) }
