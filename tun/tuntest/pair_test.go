package tuntest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/gridlink/gridlink/tun"
)

func bufs(n, size int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, tun.Offset+size)
	}
	return b, make([]int, n)
}

func TestPairCarriesBatches(t *testing.T) {
	a, b := Pair(1500)
	defer a.Close()
	defer b.Close()
	out := make([][]byte, 3)
	for i := range out {
		out[i] = append(make([]byte, tun.Offset), bytes.Repeat([]byte{byte(i + 1)}, 100*(i+1))...)
	}
	if _, err := a.Write(out, tun.Offset); err != nil {
		t.Fatal(err)
	}
	out[0][tun.Offset] = 99 // the fake copied: changing the caller's buffer changes nothing
	in, sizes := bufs(8, 1500)
	n, err := b.Read(in, sizes, tun.Offset)
	if err != nil || n != 3 {
		t.Fatalf("Read = %d, %v; want the 3 packets of one write", n, err)
	}
	for i := range n {
		want := bytes.Repeat([]byte{byte(i + 1)}, 100*(i+1))
		if got := in[i][tun.Offset : tun.Offset+sizes[i]]; !bytes.Equal(got, want) {
			t.Errorf("packet %d: %d bytes %x..., want %d bytes of %x", i, len(got), got[:1], len(want), want[0])
		}
	}
	// The other way, one packet per Read when bufs holds one.
	b.Write(out[:2], tun.Offset)
	in, sizes = bufs(1, 1500)
	for i := range 2 {
		n, err := a.Read(in, sizes, tun.Offset)
		if n != 1 || err != nil || sizes[0] != 100*(i+1) {
			t.Fatalf("read %d = %d, %v, size %d", i, n, err, sizes[0])
		}
	}
	if n, err := a.Read(nil, nil, 0); n != 0 || err != nil {
		t.Errorf("Read of no buffers = %d, %v", n, err)
	}
}

func TestPairRefusesOversizeAndShortBuffers(t *testing.T) {
	a, b := Pair(1280)
	defer a.Close()
	defer b.Close()
	big := make([]byte, tun.Offset+1281)
	ok := make([]byte, tun.Offset+1280)
	_, err := a.Write([][]byte{big, ok}, tun.Offset)
	var tooBig *PacketTooBigError
	if !errors.As(err, &tooBig) || tooBig.Len != 1281 || tooBig.MTU != 1280 {
		t.Fatalf("Write of 1281 bytes at MTU 1280: %v", err)
	}
	in, sizes := bufs(4, 100)
	n, err := b.Read(in, sizes, tun.Offset)
	if n != 0 || !errors.Is(err, io.ErrShortBuffer) {
		t.Fatalf("Read of a 1280-byte packet into 100 bytes = %d, %v", n, err)
	}
}

func TestPairClose(t *testing.T) {
	a, b := Pair(1500)
	if ev := <-a.Events(); ev != tun.EventUp {
		t.Fatalf("first event %v, want EventUp", ev)
	}
	if name, _ := b.Name(); name != "tuntest1" {
		t.Errorf("Name = %q", name)
	}
	if mtu, _ := b.MTU(); mtu != 1500 || b.BatchSize() != BatchSize {
		t.Errorf("MTU %d BatchSize %d", mtu, b.BatchSize())
	}
	done := make(chan error)
	go func() {
		in, sizes := bufs(1, 1500)
		_, err := a.Read(in, sizes, tun.Offset)
		done <- err
	}()
	a.Close()
	if err := <-done; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Read unblocked by Close returned %v", err)
	}
	if _, open := <-a.Events(); open {
		t.Error("Events still open after Close")
	}
	pkt := make([]byte, tun.Offset+20)
	if _, err := a.Write([][]byte{pkt}, tun.Offset); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if _, err := b.Write([][]byte{pkt}, tun.Offset); err != nil {
		t.Errorf("Write to a closed peer: %v, want the packet dropped", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	b.Close()
}
