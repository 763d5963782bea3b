package vconn

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// Both ends of a connection of every method can agree over TLS to leave
// it, then carry bytes in the clear (the authenticated-plain mode of
// package link).
func TestClear(t *testing.T) {
	h := testHub(t, "site")
	for _, m := range []Method{Direct, Reverse, Splice, Routed} {
		t.Run(string(m), func(t *testing.T) {
			a := testNode(t, "a-"+string(m), h, m)
			b := testNode(t, "b-"+string(m), h, m)
			l, err := b.Listen(7000)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			served := make(chan error, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					served <- err
					return
				}
				defer c.Close()
				vc := c.(*Conn)
				ask := make([]byte, 5)
				if _, err := io.ReadFull(vc, ask); err != nil || string(ask) != "clear" {
					served <- err
					return
				}
				if _, err := vc.Write([]byte("ok")); err != nil {
					served <- err
					return
				}
				if err := vc.Clear(); err != nil {
					served <- err
					return
				}
				if vc.Encrypted() {
					t.Error("acceptor still reports encryption")
				}
				_, err = io.Copy(vc, vc)
				if err == nil {
					err = vc.CloseWrite()
				}
				served <- err
			}()
			waitResolvable(t, a, b.Name())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := a.Dial(ctx, b.Name()+":7000")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !c.Encrypted() {
				t.Fatal("a new connection is not encrypted")
			}
			if _, err := c.Write([]byte("clear")); err != nil {
				t.Fatal(err)
			}
			ok := make([]byte, 2)
			if _, err := io.ReadFull(c, ok); err != nil || string(ok) != "ok" {
				t.Fatalf("agreement: %q, %v", ok, err)
			}
			if err := c.Clear(); err != nil {
				t.Fatal(err)
			}
			if err := c.Clear(); err == nil {
				t.Error("a second Clear succeeded")
			}
			if _, isTCP := c.Conn.(*net.TCPConn); m != Routed && !isTCP {
				t.Errorf("a %s connection in the clear is a %T, not the TCP connection", m, c.Conn)
			}
			echoCheck(t, c, 3<<20)
			if err := <-served; err != nil {
				t.Fatalf("acceptor: %v", err)
			}
		})
	}
}
