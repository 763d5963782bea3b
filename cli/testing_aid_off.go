//go:build !gridlinktesting

package cli

import "github.com/gridlink/gridlink"

// testingAid is false in every shipped binary: --testing-unchecked-cert
// is an unknown flag there (see testing_aid.go).
const testingAid = false

// uncheck is never called without the testing aid (no flag sets it).
func uncheck(*gridlink.Credentials) {}
