package hub

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/gridlink/gridlink/wire"
)

// BenchmarkTrunkReader reads frames from loopback TCP through a trunk's
// reader (lean, readbuf.go) and through the bufio.Reader of 8 KiB it
// replaced (reads/op: the connection's reads a block of frames took):
// relayed data (64 KiB data frames, a window frame after each,
// as a busy trunk carries both directions' frames) and small frames only
// (sealed-size control frames of 48 bytes). Reported: MB/s of frames.
func BenchmarkTrunkReader(b *testing.B) {
	data := wire.Append(wire.Append(nil, wire.TData, 5, make([]byte, MaxData)), wire.TWindow, 3, wire.WindowPayload(1<<16))
	var small []byte
	for len(small) < 64<<10 {
		small = wire.Append(small, wire.TControl, 0, make([]byte, 36))
	}
	readers := map[string]func(io.Reader) *wire.Reader{
		"lean":  NewFrameReader,
		"bufio": func(c io.Reader) *wire.Reader { return wire.NewReader(bufio.NewReaderSize(c, readBuffer)) },
	}
	for _, mix := range []struct {
		name  string
		block []byte
	}{{"data", data}, {"small", small}} {
		for _, name := range []string{"lean", "bufio"} {
			b.Run(mix.name+"/"+name, func(b *testing.B) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				go func() {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					for {
						if _, err := c.Write(mix.block); err != nil {
							return
						}
					}
				}()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cr := &countingReader{r: c}
				r := readers[name](cr)
				b.SetBytes(int64(len(mix.block)))
				b.ResetTimer()
				for range b.N {
					for n := 0; n < len(mix.block); {
						f, err := r.Read()
						if err != nil {
							b.Fatal(err)
						}
						n += wire.HeaderSize + len(f.Payload)
					}
				}
				b.ReportMetric(float64(cr.reads)/float64(b.N), "reads/op")
			})
		}
	}
}

// countingReader counts the reads of the connection under a reader.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}
