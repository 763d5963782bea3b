package socks

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A SOCKS4 request is answered in SOCKS4 (0x5B, request rejected) and a
// request of an unknown address type with 0x08, and either way the
// client reads the answer and then the end of the connection, not a
// reset, although it sent more than the server read (issue 17, item 10).
func TestProtocolReplies(t *testing.T) {
	addr := startServer(t, &Server{Backend: &fakeBackend{}})
	extra := bytes.Repeat([]byte("x"), 64) // what a client sends on, unread
	cases := []struct {
		name  string
		steps [][]byte // written in turn, each after reading want[i]
		want  [][]byte
	}{
		{"socks4", [][]byte{append([]byte{4, 1, 0, 80, 192, 0, 2, 1, 'u', 0}, extra...)}, [][]byte{{0, 0x5B, 0, 0, 0, 0, 0, 0}}},
		{"socks4a", [][]byte{append([]byte{4, 1, 0, 80, 0, 0, 0, 1, 0, 'h', '.', 'g', 'r', 'i', 'd', 0}, extra...)}, [][]byte{{0, 0x5B, 0, 0, 0, 0, 0, 0}}},
		{"atyp 5", [][]byte{{5, 1, MethodNone}, append([]byte{5, 1, 0, 5}, extra...)},
			[][]byte{{5, MethodNone}, {5, ReplyAtypNotSupported, 0, 1, 0, 0, 0, 0, 0, 0}}},
	}
	for _, c := range cases {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		for i, w := range c.steps {
			conn.Write(w)
			time.Sleep(50 * time.Millisecond) // the server reads and answers before it all arrives (real TCP: no synthetic time)
			got := make([]byte, len(c.want[i]))
			if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, c.want[i]) {
				t.Errorf("%s: answer %d: %v %v, want %v", c.name, i, got, err, c.want[i])
			}
		}
		rest, err := io.ReadAll(conn)
		if err != nil || len(rest) > 0 {
			t.Errorf("%s: after the answer: %q %v, want the end of the connection", c.name, rest, err)
		}
		conn.Close()
	}
}
