//go:build !unix

package agent

import "io/fs"

// ownerUID is unknown where files have no unix owner: the control
// directory is then refused (see prepareSocketDir).
func ownerUID(fs.FileInfo) (int, bool) { return 0, false }
