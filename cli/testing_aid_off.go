//go:build !gridlinktesting

package cli

// testingAid is false in every shipped binary: --testing-unchecked-cert
// is an unknown flag there (see testing_aid.go).
const testingAid = false
