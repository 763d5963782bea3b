package pki

// TCPPair is tcpPair for the package's external tests.
var TCPPair = tcpPair
