// Package peercredtest plays other local accounts in tests: connections
// made from a socket that another uid owns, as that account's process
// would make them (DialAs, on Linux). It needs root (tests run as root,
// CI does).
package peercredtest

// Nobody is the uid tests play another account with.
const Nobody = 65534
