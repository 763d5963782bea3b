package socks

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/peercred/peercredtest"
)

// logLines collects a server's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// Another account of this host, connecting over loopback, does not get
// to act with this user's credentials: its request is answered
// "connection not allowed by ruleset" (0x02) and the log names both
// uids; the server's own uid (root, as the tests run) is served.
func TestOtherUserRefused(t *testing.T) {
	peercredtest.NeedRoot(t)
	var log logLines
	addr := startServer(t, &Server{Backend: &fakeBackend{}, Logf: log.logf})
	echo := encodeRequest(CmdConnect, Addr{Host: "echo.grid", Port: 7})
	c := peercredtest.DialAs(t, peercredtest.Nobody, "tcp", addr)
	defer c.Close()
	if rep, _ := requestOn(t, c, echo); rep != ReplyNotAllowed {
		t.Errorf("uid %d's CONNECT: reply %#x, want %#x (not allowed by ruleset)", peercredtest.Nobody, rep, ReplyNotAllowed)
	}
	want := fmt.Sprintf("socks of uid %d refuses uid %d", os.Geteuid(), peercredtest.Nobody)
	testwait.Until(t, "the log naming the refusal", 0, func() bool { return log.has(want) })

	own, rep, _ := request(t, addr, echo)
	own.Close()
	if rep != ReplySucceeded {
		t.Errorf("the server's own uid: reply %#x, want served", rep)
	}
}
