package xfer

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A service's quota and its users' quotas bound what clients store: a put
// whose plan exceeds what is left is refused before any data flows, in
// words to the client and in the service's log; a sender whose files add
// up to more than its plan is stopped at the file that would exceed it.
func TestQuota(t *testing.T) {
	const kib = 1 << 10
	src, root := t.TempDir(), t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		randomFile(t, filepath.Join(src, n), 600*kib, 0o644)
	}
	randomFile(t, filepath.Join(src, "big"), 3000*kib, 0o644)
	var users sync.Map // a client's address: its user
	var logs logLines
	dial, _ := service(t, Config{Root: root, Quota: 1500 * kib, UserQuota: 1000 * kib, Logf: logs.add,
		User: func(c net.Conn) string { u, _ := users.Load(c.RemoteAddr().String()); return u.(string) }})
	as := func(user string) Dialer {
		return func(ctx context.Context) (net.Conn, error) {
			c, err := dial(ctx)
			if err == nil {
				users.Store(c.LocalAddr().String(), user)
			}
			return c, err
		}
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal naming %q", what, err, want)
		}
	}
	put := func(user, name string) error {
		_, err := Put(ctx, as(user), []string{filepath.Join(src, name)}, user+"-"+name, Options{Retries: -1})
		return err
	}
	// over the service's quota at once: refused at the plan
	n := len(logs.all())
	refused("a plan over the service's quota", put("alice", "big"), "exceed the 1536000 bytes left of this service's quota")
	logs.wait(t, n, "this service's quota")
	// alice: one file of 600 KiB fits her 1000 KiB, the next does not
	if err := put("alice", "a"); err != nil {
		t.Fatal(err)
	}
	n = len(logs.all())
	refused("a plan over alice's quota", put("alice", "b"), "exceed the 409600 bytes left of user alice's quota")
	logs.wait(t, n, "user alice's quota")
	// bob has his own; then the service's 1500 KiB are nearly used up
	if err := put("bob", "b"); err != nil {
		t.Fatal(err)
	}
	refused("a plan over what is left of the service", put("carol", "c"), "exceed the 307200 bytes left of this service's quota")
	for _, f := range []string{"alice-big", "alice-b", "carol-c", ".alice-big" + partSuffix, ".alice-b" + partSuffix, ".carol-c" + partSuffix} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			t.Errorf("%s was stored", f)
		}
	}
	// a sender that plans nothing and then offers more: stopped at the
	// file that would exceed the quota
	data := make([]byte, 200*kib)
	c, err := as("dave")(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep := newEndpoint(c)
	ep.sendNow(mRequest, request{op: opPut, dest: ".", paths: []string{"d1", "d2"}, flags: flagInto}.encode())
	if typ, _, err := ep.recv(); err != nil || typ != mAccept {
		t.Fatalf("put: %d %v", typ, err)
	}
	n = len(logs.all())
	said := evilSend(ep, []evilEntry{{kind: kindFile, path: "d1", mode: 0o644, data: data}, {kind: kindFile, path: "d2", mode: 0o644, data: data}})
	c.Close()
	if len(said) != 1 || !strings.Contains(said[0], "d2: 204800 bytes exceed the 102400 bytes left of this service's quota") {
		t.Errorf("a lying sender heard %q", said)
	}
	logs.wait(t, n, "d2: 204800 bytes exceed")
	if _, err := os.Stat(filepath.Join(root, "d2")); err == nil {
		t.Errorf("d2 was stored")
	}
}
