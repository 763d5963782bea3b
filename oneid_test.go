package gridlink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Issue 33's rule: on a grid with a CA, alice's agent runs with her
// proxy; a second long-running process with the same proxy (another
// agent, a serve) has the same identity. It is refused at once in one
// line (who holds the identity, where, since when; use it or stop it),
// and the agent's node keeps its hub; they no longer evict each other.
// (A one-shot task's node, cp's, has an identity of its own:
// TestOneShotNodesOwnIdentity.)
func TestSecondProcessWithProxyRefused(t *testing.T) {
	g := newFileGrid(t)
	proxy := g.config("", g.proxy)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent, err := Start(ctx, proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	start := time.Now()
	second, err := Start(ctx, proxy)
	if err == nil {
		second.Close()
		t.Fatal("a second node with alice's proxy attached while her agent's was")
	}
	if !errors.Is(err, ErrIdentityAttached) {
		t.Errorf("the second node: %v; want ErrIdentityAttached", err)
	}
	for _, want := range []string{"another process with this identity", "already runs at 127.0.0.1:", "attached to hub site since", "use it", "stop it", "gridlink proxy init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the refusal is more than one line: %q", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	g.hubLog.Line(t, "refused: another process with this identity", "("+agent.ID().Short()+")")
	if err := agent.Attached(); err != nil {
		t.Errorf("the agent's node lost its hub: %v", err)
	}
	t.Logf("refused: %v", err)
}
