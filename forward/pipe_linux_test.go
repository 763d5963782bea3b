package forward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent"
)

// TestNCPipe: nc's stdin as a real pipe (what a shell or ssh gives it):
// everything written arrives, the writer's close is the far side's EOF,
// and nc has grown the pipe so that its reads can be large.
func TestNCPipe(t *testing.T) {
	alpha, beta := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bound := make(chan string, 1)
	go Expose(ctx, beta, agent.ExposeRequest{Local: hashServer(t), Port: 8080}, func(a string) { bound <- a })
	<-bound

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msg := bytes.Repeat([]byte("piped "), 1<<20)
	want := sha256.Sum256(msg)
	go func() { w.Write(msg); w.Close() }()
	var out bytes.Buffer
	if err := NC(ctx, alpha, agent.ConnectRequest{Addr: "beta.grid:8080"}, r, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want[:]) {
		t.Fatalf("nc through a pipe: %x", out.Bytes())
	}
	size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil || size < pipeSize {
		t.Fatalf("pipe size %d (%v), want %d", size, err, pipeSize)
	}
}
