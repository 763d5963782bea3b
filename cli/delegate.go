package cli

import (
	"errors"

	"github.com/gridlink/gridlink/pki/proxy"
)

// delegator is the credential a caller of a third-party transfer
// delegates from (gridlink.CopyConfig.Delegator): its proxy (--proxy);
// nil for an open grid. Only users sign proxies: a hub's or node's
// certificate cannot delegate. The delegation itself is the product's
// (gridlink.Copy, gridlink.PushDialer).
func (sf *secFlags) delegator() (*proxy.Credential, error) {
	switch {
	case sf.caFile == "":
		return nil, nil
	case sf.proxyFile == "":
		return nil, errors.New("a third-party transfer in a grid with a CA runs as a user, whom the source acts for: give --proxy (from gridlink proxy init); a node's certificate cannot delegate")
	}
	return proxy.Load(sf.proxyFile)
}
