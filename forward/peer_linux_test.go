package forward

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/peercred/peercredtest"
)

// Another account of this host, connecting to a forwarded port over
// loopback, does not reach the overlay with this user's credentials: it
// reads the refusal naming both uids, its connection is closed, and the
// log says the same; the forwarder's own uid (root, as the tests run) is
// served (beta's echo port).
func TestOtherUserRefused(t *testing.T) {
	peercredtest.NeedRoot(t)
	alpha, _ := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedLog
	go Forward(ctx, l, alpha, control.ConnectRequest{Addr: "beta:7"}, Options{Logf: logs.logf})

	want := fmt.Sprintf("forward of uid %d refuses uid %d", os.Geteuid(), peercredtest.Nobody)
	c := peercredtest.DialAs(t, peercredtest.Nobody, "tcp", l.Addr().String())
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte("as nobody"))
	got, _ := io.ReadAll(c)
	if !strings.Contains(string(got), want) {
		t.Errorf("uid %d read %q; want the refusal %q and the end", peercredtest.Nobody, got, want)
	}
	testwait.Until(t, "the log naming the refusal", 0, func() bool { return strings.Contains(logs.String(), want) })

	own, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	own.SetDeadline(time.Now().Add(30 * time.Second))
	own.Write([]byte("as root"))
	echo := make([]byte, len("as root"))
	if _, err := io.ReadFull(own, echo); err != nil || string(echo) != "as root" {
		t.Errorf("the forwarder's own uid: %q %v; want the echo", echo, err)
	}
}
