package hub

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/wire"
)

const (
	// linkKeysLabel names the keys a link's ends derive from its handshake.
	linkKeysLabel = "gridlink hub link keys v1"
	// readBuffer is a link's read buffer: small frames (control, windows)
	// arrive many per read; a data frame's payload mostly bypasses it.
	readBuffer = 8 << 10
)

// secured is a link after its handshake: the peer, the sealer for what
// this end sends, the reader of what it receives, and the TLS session,
// kept only to read the peer's verdict (verdict) before the first frame.
type secured struct {
	peer identity.ID
	s    *wire.Sealer
	r    *wire.Reader
	tc   *pki.Conn
}

// verdict waits for the peer's verdict on this end (pki.Conn.Verdict):
// read before the link's first frame, which follows it.
func (l *secured) verdict() error { return l.tc.Verdict() }

// explain turns a failed write into the peer's refusal, if it refused us.
func (l *secured) explain(err error) error { return l.tc.Explain(err) }

// secure runs the TLS handshake over c, as the dialling end (client, which
// checks that the peer is want unless want is zero) or the accepting end,
// judges the peer (its certificate chain against the hub's or node's
// trust; role, which must be "hub" unless empty) and moves c to the
// link's sealed phase (wire/seal.go): after the peer's verdict, c carries
// frames, not TLS records. Control frames are sealed with keys from the
// handshake; data frames, protected end to end, are relayed without being
// encrypted again on every hop.
func secure(ctx context.Context, creds *pki.Credentials, c net.Conn, client bool, want identity.ID, role ca.Role) (*secured, error) {
	judge := func(p pki.Peer) error {
		if role != "" && p.Chain != nil && p.Chain.Role != role {
			return fmt.Errorf("%s has a %s certificate, not a %s's", p.Chain.Subject(), p.Chain.Role, role)
		}
		return nil
	}
	var tc *pki.Conn
	var err error
	if client {
		tc, err = creds.Client(ctx, pki.NoReadAhead(c), want, judge)
	} else {
		tc, err = creds.Server(ctx, pki.NoReadAhead(c), judge)
	}
	if err != nil {
		return nil, err
	}
	send, recv, err := pki.ChannelKeys(tc.Conn, linkKeysLabel, client)
	if err != nil {
		return nil, err
	}
	s, err := wire.NewSealer(send)
	if err != nil {
		return nil, err
	}
	r := wire.NewReader(bufio.NewReaderSize(c, readBuffer)) // c, not the TLS conn: nothing is buffered there
	if err := r.Unseal(recv); err != nil {
		return nil, err
	}
	return &secured{peer: tc.Peer.ID, s: s, r: r, tc: tc}, nil
}

// readHello reads the peer's hello (readHello), naming the peer as the
// handshake proved it in a refusal, and checks that the peer's
// certificate certifies the name its hello gives.
func (l *secured) readHello() (*wire.Hello, error) {
	hello, err := readHello(l.r, l.peer)
	var re *RefusedError
	if errors.As(err, &re) {
		re.Hub = l.tc.Peer.String()
	}
	if err != nil {
		return nil, err
	}
	if err := l.tc.Peer.MayUse(hello.Machine.Name); err != nil {
		return nil, err
	}
	return hello, nil
}

// writeHello sends a link's first frame, before the link's writer exists.
func writeHello(c net.Conn, s *wire.Sealer, hello *wire.Hello) error {
	_, err := c.Write(s.Append(nil, wire.TControl, 0, 0, wire.Encode(&wire.Message{Kind: wire.KHello, Hello: hello})))
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}

// admitRole checks that what a peer's hello says it is (a hub linking, a
// node attaching) matches its certificate: only hubs link, and hubs do not
// attach as nodes. In an open grid (no chain) anyone may be either.
func admitRole(p pki.Peer, hello string) error {
	if p.Chain == nil {
		return nil
	}
	switch {
	case hello == "hub" && p.Chain.Role != ca.Hub:
		return fmt.Errorf("%s has a %s certificate but asked to link as a hub", p, p.Chain.Role)
	case hello != "hub" && p.Chain.Role == ca.Hub:
		return fmt.Errorf("%s has a hub certificate but asked to attach as a node", p)
	}
	return nil
}

// watchRevocations closes the links of hubs and nodes that a new
// revocation list revokes: a revoked member is cut off at once, not only
// refused when it next connects. Its circuits go with its link. It also
// passes the new list on to the neighbour hubs (crl.go).
func (h *Hub) watchRevocations(ctx context.Context) {
	t := h.cfg.Creds.Trust()
	if t == nil {
		return // an open grid
	}
	t.OnChange(ctx.Done(), func() {
		h.broadcastCRLs()
		h.mu.Lock()
		peers := make([]*peer, 0, len(h.all))
		for p := range h.all {
			peers = append(peers, p)
		}
		h.mu.Unlock()
		for _, p := range peers {
			if err := t.Recheck(p.who); err != nil {
				h.logf("hub %s: closing the link of %s, no longer admitted: %v", h.cfg.Name, p.who, err)
				p.l.close(fmt.Errorf("%s is no longer admitted: %w", p.who, err))
			}
		}
	})
}
