//go:build gridlinktesting

package cli

// testingAid says whether this binary has the hidden testing aid
// --testing-unchecked-cert: only one built with -tags gridlinktesting
// (the lab's outsider tests build their own); no shipped binary has it.
const testingAid = true
