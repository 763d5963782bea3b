package forward

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// nc --help's example, echo hello | gridlink nc NODE:7, prints hello and
// nothing else: the built-in echo answers raw, so the agent dials it raw
// (issue 17, item 6: the link hello came back before hello). Through a
// pipe (the agent copies, handoff) and through a reader (nc copies), and
// by the service's name.
func TestNCEcho(t *testing.T) {
	alpha, _ := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, addr := range []string{"beta:7", "beta.grid:echo"} {
		var out bytes.Buffer
		if err := NC(ctx, alpha, control.ConnectRequest{Addr: addr}, bytes.NewReader([]byte("hello\n")), &out); err != nil {
			t.Fatal(err)
		}
		if out.String() != "hello\n" {
			t.Errorf("nc %s (copied here): %q, want %q", addr, out.Bytes(), "hello\n")
		}
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		inW.Write([]byte("hello\n"))
		inW.Close()
		if err := NC(ctx, alpha, control.ConnectRequest{Addr: addr}, inR, outW); err != nil {
			t.Fatal(err)
		}
		outW.Close()
		got, _ := io.ReadAll(outR)
		inR.Close()
		outR.Close()
		if string(got) != "hello\n" {
			t.Errorf("nc %s (handed off): %q, want %q", addr, got, "hello\n")
		}
	}
}
