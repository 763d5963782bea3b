//go:build !unix

package cli

import "os"

// winch is nil where terminals send no size-change signal.
var winch os.Signal
