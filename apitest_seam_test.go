package gridlink

import "github.com/gridlink/gridlink/vconn"

// How tests that run nodes on vconn make the API's Config and Node of
// them.

func apiConfig(cfg vconn.Config) Config {
	return Config{Name: cfg.Name, creds: cfg.Creds, ListenAddr: cfg.ListenAddr, Hubs: cfg.Hubs}
}

func apiNode(n *vconn.Node, cfg vconn.Config) *Node { return &Node{n: n, creds: cfg.Creds} }
