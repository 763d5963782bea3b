package hub

import (
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
	// linkKeysLabel names the keys a trunk's ends derive from its handshake
	// (the label predates the word trunk; it is part of the protocol).
	linkKeysLabel = "gridlink hub link keys v1"
)

// Secured is a trunk after its handshake: the peer, the sealer for what
// this end sends, the reader of what it receives, and the TLS session,
// kept only to read the peer's verdict (Verdict) before the first frame.
type Secured struct {
	Peer   identity.ID
	Sealer *wire.Sealer
	Reader *wire.Reader
	TLS    *pki.Conn
}

// Verdict waits for the peer's verdict on this end (pki.Conn.Verdict):
// read before the trunk's first frame, which follows it.
func (l *Secured) Verdict() error { return l.TLS.Verdict() }

// Explain turns a failed write into the peer's refusal, if it refused us.
func (l *Secured) Explain(err error) error { return l.TLS.Explain(err) }

// Secure runs the TLS handshake over c, as the dialling end (client, which
// checks that the peer is want unless want is zero) or the accepting end,
// judges the peer (its certificate chain against the hub's or node's
// trust; role, which must be "hub" unless empty) and moves c to the
// trunk's sealed phase (wire/seal.go): after the peer's verdict, c carries
// frames, not TLS records. Control frames are sealed with keys from the
// handshake; data frames, protected end to end, are relayed without being
// encrypted again on every hop.
func Secure(ctx context.Context, creds *pki.Credentials, c net.Conn, client bool, want identity.ID, role ca.Role) (*Secured, error) {
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
	r := NewFrameReader(c) // c, not the TLS conn: nothing is buffered there
	if err := r.Unseal(recv); err != nil {
		return nil, err
	}
	return &Secured{Peer: tc.Peer.ID, Sealer: s, Reader: r, TLS: tc}, nil
}

// ReadHello reads the peer's hello (the function ReadHello), naming the
// peer as the handshake proved it in a refusal, and checks that the
// peer's certificate certifies the name its hello gives.
func (l *Secured) ReadHello() (*wire.Hello, error) {
	hello, err := ReadHello(l.Reader, l.Peer)
	var re *RefusedError
	if errors.As(err, &re) {
		re.Hub = l.TLS.Peer.String()
	}
	if err != nil {
		return nil, err
	}
	if err := l.TLS.Peer.MayUse(hello.Machine.Name); err != nil {
		return nil, err
	}
	return hello, nil
}

// WriteHello sends a trunk's first frame, before the trunk's writer exists.
func WriteHello(c net.Conn, s *wire.Sealer, hello *wire.Hello) error {
	_, err := c.Write(s.Append(nil, wire.TControl, 0, 0, wire.Encode(&wire.Message{Kind: wire.KHello, Hello: hello})))
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}

// ReadHello reads the first frame of a trunk: a hello from the machine the
// handshake proved.
func ReadHello(r *wire.Reader, id identity.ID) (*wire.Hello, error) {
	f, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("reading hello: %w", err)
	}
	if f.Type != wire.TControl {
		return nil, fmt.Errorf("first frame is %s, want a hello", f.Type)
	}
	m, err := wire.Decode(f.Payload)
	if err != nil {
		return nil, err
	}
	if m.Kind == wire.KRefused {
		return nil, refusedBy(id.Short(), m.Refusal)
	}
	if m.Kind != wire.KHello {
		return nil, fmt.Errorf("first message is %s, want a hello", m.Kind)
	}
	if m.Hello.Machine.ID != id {
		return nil, fmt.Errorf("hello names %s but the handshake proved %s", m.Hello.Machine.ID.Short(), id.Short())
	}
	return m.Hello, nil
}

// DialTCP is the default dial of a hub to other hubs and of a session
// to its hubs: one connect, not direct.ConnectTCP's race. A hub dials
// hubs it learned of, reachable or not, again and again; behind a
// sequential NAT every extra SYN takes one more of the NAT's ports, and
// four a dial moved its counter so far between the hub's own
// observations that the NAT looked random (and could no longer be
// spliced through: nat-zoo's sequential-h).
func DialTCP(ctx context.Context, spec string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", spec)
}
