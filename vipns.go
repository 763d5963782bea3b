package gridlink

import (
	"errors"
	"fmt"
	"syscall"
)

// What `gridlink vip exec` needs of the kernel, and why it failed in
// words a site's administrator can act on (docs/vip.md "Without root").

// VIPNamespaceError is why gridlink vip exec could not make its
// namespace or the device in it: the step, what is missing (Missing, the
// setting or file a site must change; empty when unknown) and the
// system's error (errors.Is works on it: syscall.EPERM, syscall.EACCES,
// syscall.ENOSPC...).
type VIPNamespaceError struct {
	Step    string
	Missing string
	Err     error
}

func (e *VIPNamespaceError) Error() string {
	s := fmt.Sprintf("gridlink vip exec: %s: %v", e.Step, e.Err)
	if e.Missing != "" {
		s += "; " + e.Missing
	}
	return s
}

func (e *VIPNamespaceError) Unwrap() error { return e.Err }

// childError is a failure in the namespace as the child reports it to
// its parent (its step, the text and the errno, if any).
type childError struct {
	Step  string `json:"step"`
	Msg   string `json:"error"`
	Errno int    `json:"errno,omitempty"`
}

func (c childError) err() error {
	var err error = errors.New(c.Msg)
	if c.Errno != 0 {
		err = &errnoText{msg: c.Msg, errno: syscall.Errno(c.Errno)}
	}
	return &VIPNamespaceError{Step: c.Step, Err: err}
}

// errnoText is an error text from the child that keeps its errno for
// errors.Is.
type errnoText struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoText) Error() string { return e.msg }
func (e *errnoText) Unwrap() error { return e.errno }
