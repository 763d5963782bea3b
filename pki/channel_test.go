package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// After a handshake over NoReadAhead, each end's first raw bytes reach the
// other end's raw connection intact: the tls.Conns kept none of them. Both
// ends derive crossed keys.
func TestNoReadAheadSwitch(t *testing.T) {
	alice, bob := creds(t, 1), creds(t, 2)
	for i := 0; i < 20; i++ { // the race between handshake end and raw bytes varies
		a, b := tcpPair(t)
		a.SetDeadline(time.Now().Add(5 * time.Second)) // a read-ahead shows as a time-out
		b.SetDeadline(time.Now().Add(5 * time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		type end struct {
			send, recv []byte
			got        []byte
			err        error
		}
		serve := make(chan end, 1)
		go func() {
			tc, err := bob.Server(ctx, NoReadAhead(b), nil)
			if err != nil {
				serve <- end{err: err}
				return
			}
			s, r, err := ChannelKeys(tc.Conn, "test", false)
			if err == nil {
				err = tc.Verdict() // the verdict is the last record: raw bytes follow
			}
			if err == nil {
				_, err = b.Write([]byte("raw from the server"))
			}
			got := make([]byte, len("raw from the client"))
			if err == nil {
				_, err = io.ReadFull(b, got)
			}
			serve <- end{s, r, got, err}
		}()
		tc, err := alice.Client(ctx, NoReadAhead(a), bob.Key.ID(), nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, cr, err := ChannelKeys(tc.Conn, "test", true)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.Verdict(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([]byte("raw from the client")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("raw from the server"))
		if _, err := io.ReadFull(a, got); err != nil {
			t.Fatal(err)
		}
		srv := <-serve
		cancel()
		if srv.err != nil {
			t.Fatal(srv.err)
		}
		if string(got) != "raw from the server" || string(srv.got) != "raw from the client" {
			t.Fatalf("raw bytes after the handshake: client got %q, server got %q", got, srv.got)
		}
		if !bytes.Equal(cs, srv.recv) || !bytes.Equal(cr, srv.send) || bytes.Equal(cs, cr) || len(cs) != 32 {
			t.Fatalf("keys not crossed: client send %x recv %x, server send %x recv %x", cs, cr, srv.send, srv.recv)
		}
		a.Close()
		b.Close()
	}
}

// Without NoReadAhead the switch is unsafe (the point of the wrapper):
// reads through it stop at record boundaries even when more is buffered.
func TestRecordConnStopsAtBoundary(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	rec := func(body string) []byte {
		return append([]byte{23, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
	}
	stream := append(rec("first"), rec("second")...)
	stream = append(stream, "raw tail"...)
	if _, err := a.Write(stream); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // everything is in b's socket buffer (a real TCP socket: no synthetic time)
	rc := NoReadAhead(b)
	buf := make([]byte, 1024)
	var got []byte
	for len(got) < len(stream)-len("raw tail") {
		n, err := rc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, stream[:len(got)]) || len(got) != len(stream)-len("raw tail") {
		t.Fatalf("read %q through the wrapper, want exactly the two records", got)
	}
	n, _ := b.Read(buf)
	if string(buf[:n]) != "raw tail" {
		t.Fatalf("raw read after the records: %q", buf[:n])
	}
}

// Beneath hands over the connection under a TLS session after an exchange
// of records: the bytes that follow, sent raw, arrive raw.
func TestBeneath(t *testing.T) {
	alice, bob := creds(t, 1), creds(t, 2)
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type end struct {
		got string
		err error
	}
	serve := make(chan end, 1)
	go func() {
		tc, err := bob.Server(ctx, b, nil) // Server wraps b itself
		if err != nil {
			serve <- end{err: err}
			return
		}
		hello := make([]byte, 5)
		if _, err := io.ReadFull(tc, hello); err != nil {
			serve <- end{err: err}
			return
		}
		if _, err := tc.Write([]byte("agreed")); err != nil {
			serve <- end{err: err}
			return
		}
		raw, err := Beneath(tc.Conn)
		if err != nil {
			serve <- end{err: err}
			return
		}
		tail := make([]byte, 10)
		_, err = io.ReadFull(raw, tail)
		serve <- end{string(hello) + "|" + string(tail), err}
	}()
	tc, err := alice.Client(ctx, a, bob.Key.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 6)
	if _, err := io.ReadFull(tc, reply); err != nil {
		t.Fatal(err)
	}
	raw, err := Beneath(tc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if raw != a {
		t.Fatalf("Beneath returned %T, not the TCP connection", raw)
	}
	if _, err := raw.Write([]byte("clear tail")); err != nil {
		t.Fatal(err)
	}
	srv := <-serve
	if srv.err != nil || srv.got != "hello|clear tail" {
		t.Fatalf("server read %q, %v; want hello|clear tail", srv.got, srv.err)
	}

	// Nor one that was told it may read ahead.
	x, y := tcpPair(t)
	defer x.Close()
	defer y.Close()
	go func() { _, _ = bob.Server(ctx, y, nil) }()
	tx, err := alice.Client(ctx, x, bob.Key.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ReadAhead(tx.Conn)
	if _, err := Beneath(tx.Conn); err == nil || !strings.Contains(err.Error(), "reads ahead") {
		t.Fatalf("Beneath after ReadAhead: %v", err)
	}

	// A TLS connection that may have read ahead is refused.
	c, d := tcpPair(t)
	defer c.Close()
	defer d.Close()
	if _, err := Beneath(tls.Client(c, &tls.Config{})); err == nil {
		t.Fatal("Beneath accepted a TLS connection without NoReadAhead")
	}
}

// countConn counts the writes to a connection.
type countConn struct {
	net.Conn
	writes int
}

func (c *countConn) Write(p []byte) (int, error) { c.writes++; return c.Conn.Write(p) }

// WriteRecords gathers a large write's records into few writes, and the
// bytes arrive intact.
func TestWriteRecords(t *testing.T) {
	alice, bob := creds(t, 1), creds(t, 2)
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan []byte, 1)
	go func() {
		tc, err := bob.Server(ctx, b, nil)
		if err != nil {
			got <- nil
			return
		}
		data, err := io.ReadAll(tc)
		if err != nil {
			t.Log(err)
		}
		got <- data
	}()
	cc := &countConn{Conn: a}
	tc, err := alice.Client(ctx, cc, bob.Key.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 13)
	}
	before := cc.writes
	if n, err := tc.WriteRecords(data); n != len(data) || err != nil {
		t.Fatalf("WriteRecords: %d, %v", n, err)
	}
	if w := cc.writes - before; w > 8 {
		t.Errorf("1 MiB (64 records) took %d writes, want at most 8", w)
	}
	tc.Close()
	if r := <-got; !bytes.Equal(r, data) {
		t.Fatalf("received %d bytes, not the %d sent", len(r), len(data))
	}

	// A write once the connection beneath is gone fails.
	cc.Conn.Close()
	if _, err := tc.WriteRecords(data); err == nil {
		t.Fatal("a write to a closed connection succeeded")
	}
}
