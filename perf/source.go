package perf

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gridlink/gridlink/link"
)

// textCorpus is how much log-like text a "text" source cycles through:
// far more than a block, so blocks differ as a log's do.
const textCorpus = 16 << 20

// NewSource returns a function that fills a buffer with the next bytes of
// a kind of data:
//
//	zero    zeros (compress to nearly nothing: the codec's best case)
//	random  fresh random bytes every time (incompressible)
//	text    log-like text (link.TextData), as logs compress
func NewSource(kind string) (func([]byte), error) {
	switch kind {
	case "zero":
		return func(b []byte) { clear(b) }, nil
	case "random":
		var seed [32]byte
		s := uint64(time.Now().UnixNano())
		for i := range 4 {
			s = s*6364136223846793005 + 1442695040888963407
			for j := range 8 {
				seed[i*8+j] = byte(s >> (8 * j))
			}
		}
		rng := rand.NewChaCha8(seed)
		return func(b []byte) { _, _ = rng.Read(b) }, nil
	case "text":
		corpus := link.TextData(1, textCorpus)
		off := 0
		return func(b []byte) {
			for n := 0; n < len(b); {
				k := copy(b[n:], corpus[off:])
				n += k
				off = (off + k) % len(corpus)
			}
		}, nil
	}
	return nil, fmt.Errorf("perf: unknown data %q: want zero, random or text", kind)
}
