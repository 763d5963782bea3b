package hub

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

const (
	// linkKeysLabel names the keys a link's ends derive from its handshake.
	linkKeysLabel = "gridlink hub link keys v1"
	// readBuffer is a link's read buffer: small frames (control, windows)
	// arrive many per read; a data frame's payload mostly bypasses it.
	readBuffer = 8 << 10
)

// secure runs the TLS handshake over c, as the dialling end (client, which
// checks that the peer is want unless want is zero) or the accepting end,
// and moves c to the link's sealed phase (wire/seal.go): from here on c
// carries frames, not TLS records. It returns the peer's ID, the sealer
// for what this end sends and the reader of what it receives. Control
// frames are sealed with keys from the handshake; data frames, protected
// end to end, are relayed without being encrypted again on every hop.
func secure(ctx context.Context, creds *pki.Credentials, c net.Conn, client bool, want identity.ID) (identity.ID, *wire.Sealer, *wire.Reader, error) {
	var tc *tls.Conn
	var id identity.ID
	var err error
	if client {
		tc, id, err = creds.Client(ctx, pki.NoReadAhead(c), want)
	} else {
		tc, id, err = creds.Server(ctx, pki.NoReadAhead(c), nil)
	}
	if err != nil {
		return id, nil, nil, err
	}
	send, recv, err := pki.ChannelKeys(tc, linkKeysLabel, client)
	if err != nil {
		return id, nil, nil, err
	}
	s, err := wire.NewSealer(send)
	if err != nil {
		return id, nil, nil, err
	}
	r := wire.NewReader(bufio.NewReaderSize(c, readBuffer)) // c, not the TLS conn: nothing is buffered there
	if err := r.Unseal(recv); err != nil {
		return id, nil, nil, err
	}
	return id, s, r, nil
}

// writeHello sends a link's first frame, before the link's writer exists.
func writeHello(c net.Conn, s *wire.Sealer, hello *wire.Hello) error {
	_, err := c.Write(s.Append(nil, wire.TControl, 0, 0, wire.Encode(&wire.Message{Kind: wire.KHello, Hello: hello})))
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}
