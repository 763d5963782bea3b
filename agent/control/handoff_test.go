package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// An agent that does not offer the handoff (an older one, or not on
// Linux) answers the 101 without Gridlink-Handoff: Hand then sends
// nothing and says ErrNoHandoff, and Join copies through the stream as
// before, with no choice byte in front of the bytes.
func TestHandoffNotOffered(t *testing.T) {
	control := fmt.Sprintf("@gridlink-test-%d-oldagent", os.Getpid())
	l, err := net.Listen("unix", control)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+StreamProto+"\r\n\r\n")
		io.Copy(c, br) // echo, choice byte included if one were sent
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Dial(control).Open(ctx, ConnectRequest{Addr: "beta.grid:22"})
	if err != nil {
		t.Fatal(err)
	}
	program, end := net.Pipe()
	if err := s.Hand(); !errors.Is(err, ErrNoHandoff) {
		t.Fatalf("hand to an agent that does not offer it: %v, want ErrNoHandoff", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Join(end) }()
	program.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := program.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(program, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo %q, %v", got, err)
	}
	program.Close()
	if err := <-done; err != nil {
		t.Fatalf("join: %v", err)
	}
}
