//go:build !unix

package exec

func defaultSignals() {}
