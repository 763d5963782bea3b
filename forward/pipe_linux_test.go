package forward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// TestNCPipe: nc's stdin as a real pipe (what a shell or ssh gives it):
// everything written arrives, the writer's close is the far side's EOF,
// and nc has grown the pipe so that reads can be large. With stdout a
// pipe too, the agent copies both (handoff); with stdout a buffer, nc.
func TestNCPipe(t *testing.T) {
	alpha, beta := twoAgents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bound := make(chan string, 1)
	go Expose(ctx, beta, control.ExposeRequest{Local: hashServer(t), Port: 8080}, func(a string) { bound <- a })
	<-bound

	msg := bytes.Repeat([]byte("piped "), 1<<20)
	want := sha256.Sum256(msg)
	for _, outPipe := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() { w.Write(msg); w.Close() }()
		var out io.Writer
		var buf bytes.Buffer
		got := make(chan []byte, 1)
		if outPipe {
			or, ow, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() { b, _ := io.ReadAll(or); or.Close(); got <- b }()
			defer ow.Close()
			out = ow
		} else {
			out = &buf
		}
		if err := NC(ctx, alpha, control.ConnectRequest{Addr: "beta.grid:8080"}, r, out); err != nil {
			t.Fatal(err)
		}
		if f, ok := out.(*os.File); ok {
			f.Close() // as the process's exit would
			buf.Write(<-got)
		}
		if !bytes.Equal(buf.Bytes(), want[:]) {
			t.Fatalf("nc through a pipe (stdout a pipe: %v): %x", outPipe, buf.Bytes())
		}
		size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
		if err != nil || size < pipeSize {
			t.Fatalf("pipe size %d (%v), want %d", size, err, pipeSize)
		}
		r.Close()
	}
}
