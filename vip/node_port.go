package vip

// Port is the virtual port of every node's virtual network service
// (`gridlink node --vip`): a node dials it on a peer for the packet
// connection (Dialer) and hands what it accepts there to Accept with the
// peer's authenticated identity. It sits beside the agent's echo (7),
// sink (9), exit (10) and service directory (11, vconn.DirectoryPort);
// its wire format is frame.go's. Only grid members reach it: vconn
// admits a connection only after both ends proved their identity (and,
// with a grid CA, their certificates).
const Port = 12

// CarrierPort is the virtual port of a node's carriers (carrier.go): the
// more connections to a peer that flows are hashed onto, each starting
// with the carrier hello. A node hands what it accepts there to
// AcceptCarrier. A node older than carriers does not listen on it.
const CarrierPort = 13
