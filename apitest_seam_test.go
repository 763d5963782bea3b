package gridlink

import "github.com/gridlink/gridlink/vconn"

// How tests that run nodes on vconn make the API's Config and Node of
// them: the one place to change when Config stops being vconn.Config.

func apiConfig(cfg vconn.Config) Config { return cfg }

func apiNode(n *vconn.Node, cfg vconn.Config) *Node { return &Node{n: n} }
