package exec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/link"
)

// Issue 21's target: stdin through exec streams at 90% or more of what a
// plain stream through the agent carries (gridlink nc's path where it
// cannot hand its descriptors over). Both send 64 MiB from the caller's
// agent to the target on loopback: exec into cat >/dev/null, the stream
// into a link listener that discards (go test -bench . ./exec).

const benchBytes = 64 << 20

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func BenchmarkStdin(b *testing.B) {
	gr := newGrid(b, aliceMap, false)
	alice := gr.user(b, "alice")
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := execAt(ctx, alice, Request{Command: []string{"cat >/dev/null"}}, IO{Stdin: io.LimitReader(zeros{}, benchBytes)})
		cancel()
		if err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
	}
}

// BenchmarkStdinPipe is BenchmarkStdin with stdin from a pipe in
// blocking mode, as a shell gives it: on a link of its own (Linux), the
// pipe it is spliced into handed to the caller's agent.
func BenchmarkStdinPipe(b *testing.B) {
	gr := newGrid(b, aliceMap, false)
	alice := gr.user(b, "alice")
	zero := make([]byte, 1<<20)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var fds [2]int
		syscall.ForkLock.RLock()
		err := syscall.Pipe(fds[:])
		if err == nil {
			syscall.CloseOnExec(fds[0])
			syscall.CloseOnExec(fds[1])
		}
		syscall.ForkLock.RUnlock()
		if err != nil {
			b.Fatal(err)
		}
		r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
		go func() {
			for n := 0; n < benchBytes; n += len(zero) {
				if _, err := w.Write(zero); err != nil {
					break
				}
			}
			w.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := execAt(ctx, alice, Request{Command: []string{"cat >/dev/null"}}, IO{Stdin: r})
		cancel()
		r.Close()
		if err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
	}
}

func BenchmarkStream(b *testing.B) {
	gr := newGrid(b, aliceMap, false)
	alice := gr.user(b, "alice")
	l, err := link.Listen(gr.target.Node(), 5555, link.ListenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d", n)
				c.Close()
			}()
		}
	}()
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, err := alice.Connect(ctx, control.ConnectRequest{Addr: "target:5555"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(c, io.LimitReader(zeros{}, benchBytes)); err != nil {
			b.Fatal(err)
		}
		_ = c.(interface{ CloseWrite() error }).CloseWrite()
		got, _ := io.ReadAll(c)
		c.Close()
		cancel()
		if !bytes.Equal(got, []byte(fmt.Sprint(benchBytes))) {
			b.Fatalf("the sink got %q bytes", got)
		}
	}
}
