package link

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

func TestParseCompression(t *testing.T) {
	for _, c := range []Compression{CompressOff, CompressS2, CompressZstd, CompressAuto} {
		got, err := ParseCompression(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCompression(%q) = %v, %v", c.String(), got, err)
		}
	}
	if c, err := ParseCompression("ZSTD"); err != nil || c != CompressZstd {
		t.Errorf("ParseCompression(ZSTD) = %v, %v", c, err)
	}
	for _, s := range []string{"", "gzip", "on"} {
		if _, err := ParseCompression(s); err == nil {
			t.Errorf("ParseCompression(%q) succeeded", s)
		}
	}
	var flag Compression
	if err := flag.Set("auto"); err != nil || flag != CompressAuto {
		t.Errorf("Set(auto): %v, %v", flag, err)
	}
	if err := flag.Set("lz4"); err == nil || flag != CompressAuto {
		t.Errorf("Set(lz4): %v, %v", flag, err)
	}
	if s := Compression(9).String(); s != "compression(9)" {
		t.Errorf("Compression(9) is %q", s)
	}
}

// TestChoose is the decision rule's table: rates in MB/s, ratios, and what
// it must choose.
func TestChoose(t *testing.T) {
	const M = 1e6
	text := func(net float64) estimate { // as measured on this kind of machine
		return estimate{net: net * M, workers: 2, speed: [numCodecs]float64{0, 450 * M, 130 * M}, ratio: [numCodecs]float64{0, 0.38, 0.25}}
	}
	random := estimate{net: 50 * M, workers: 2, speed: [numCodecs]float64{0, 4000 * M, 1500 * M}, ratio: [numCodecs]float64{0, 1, 1}}
	for _, tc := range []struct {
		name string
		e    estimate
		want codec
	}{
		{"network not measured yet", func() estimate { e := text(0); return e }(), codecNone},
		{"codecs not measured yet", estimate{net: 50 * M, workers: 2}, codecNone},
		{"slow network, text: zstd's ratio pays", text(50), codecZstd},
		{"very slow network, text", text(1), codecZstd},
		{"slow network, random", random, codecNone},
		{"fast network, random", func() estimate { e := random; e.net = 3000 * M; return e }(), codecNone},
		{"fast network, text: no codec keeps up", text(3000), codecNone},
		{"medium network, text: s2 keeps up, zstd does not", text(300), codecS2},
		{"one worker, slow network, text", func() estimate { e := text(100); e.workers = 1; return e }(), codecS2},
		{"zstd reached less than s2 promises", func() estimate { e := text(50); e.reached[codecZstd] = 90 * M; return e }(), codecS2},
		{"both reached: the better", func() estimate {
			e := text(50)
			e.reached[codecZstd], e.reached[codecS2] = 110*M, 100*M
			return e
		}(), codecZstd},
		{"compression reached less than the network", func() estimate {
			e := text(300)
			e.reached[codecS2] = 290 * M
			return e
		}(), codecNone},
		{"barely compressible: not worth it", func() estimate {
			e := random
			e.ratio[codecS2], e.ratio[codecZstd] = 0.95, 0.93
			return e
		}(), codecNone},
		{"somewhat compressible, slow network", func() estimate {
			e := random
			e.ratio[codecS2], e.ratio[codecZstd] = 0.8, 0.7
			return e
		}(), codecZstd},
	} {
		if got := choose(tc.e); got != tc.want {
			t.Errorf("%s: chose %s, want %s (rates: none %.0f, s2 %.0f, zstd %.0f MB/s)", tc.name, got, tc.want,
				tc.e.rate(codecNone)/M, tc.e.rate(codecS2)/M, tc.e.rate(codecZstd)/M)
		}
	}
}

func TestTextData(t *testing.T) {
	a, b := TextData(7, 1<<20), TextData(7, 1<<20)
	if !bytes.Equal(a, b) || len(a) != 1<<20 {
		t.Fatalf("TextData is not deterministic or not %d bytes", 1<<20)
	}
	if bytes.Equal(a[:1000], TextData(8, 1000)) {
		t.Errorf("the seed makes no difference")
	}
	lines := strings.Split(string(a), "\n")
	distinct := map[string]bool{}
	for _, l := range lines {
		distinct[l] = true
	}
	if len(lines) < 5000 || len(distinct) < len(lines)*9/10 {
		t.Errorf("%d lines, %d distinct", len(lines), len(distinct))
	}
	ratio := float64(len(s2.Encode(nil, a))) / float64(len(a))
	t.Logf("%d lines, s2 ratio %.2f; first: %s", len(lines), ratio, lines[0])
	if ratio < 0.2 || ratio > 0.6 {
		t.Errorf("s2 ratio %.2f: not like a log", ratio)
	}
}

// TestCompressionRoundTrip sends text, random bytes and both in turns with
// each setting over three streams and checks what arrives and the
// counters.
func TestCompressionRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pairs := newPairs(t)
	text, random := TextData(1, 3<<20), randomData(rng, 3<<20)
	both := append(append(bytes.Clone(text[:1<<20]), random[:1<<20]...), text[1<<20:2<<20]...)
	for _, c := range []Compression{CompressOff, CompressS2, CompressZstd, CompressAuto} {
		for _, d := range []struct {
			name string
			data []byte
		}{{"text", text}, {"random", random}, {"both", both}} {
			var wc, rc []net.Conn
			for range 3 {
				a, b := pairs.tcp()
				wc, rc = append(wc, a), append(rc, b)
			}
			cfg := Config{Compression: c, BlockSize: 100 << 10}
			w, r := NewWriter(cfg, wc...), NewReader(Config{}, rc...)
			got := readAll(r)
			for p := d.data; len(p) > 0; { // writes of odd sizes
				k := min(len(p), 1+rng.IntN(300<<10))
				if _, err := w.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			res := wait(t, got, "reader")
			if res.err != nil {
				t.Fatalf("%s, %s: %v", c, d.name, res.err)
			}
			sameData(t, res.data, d.data)
			ws, rs := w.Stats(), r.Stats()
			t.Logf("%s, %s: %d bytes, %d on the wire, blocks %+v", c, d.name, ws.Written, ws.Wire, ws.Blocks)
			if rs.Wire != ws.Wire || rs.Blocks != ws.Blocks || rs.Received != ws.Written {
				t.Errorf("%s, %s: reader counted %d bytes, %d on the wire, %+v", c, d.name, rs.Received, rs.Wire, rs.Blocks)
			}
			fixed := c == CompressS2 || c == CompressZstd
			switch {
			case c == CompressOff && (ws.Wire != ws.Written || ws.Blocks.S2+ws.Blocks.Zstd != 0):
				t.Errorf("%s, %s: compressed", c, d.name)
			case fixed && d.name == "text" && (ws.Blocks.None != 0 || ws.Wire > ws.Written*6/10):
				t.Errorf("%s, %s: text went as %d bytes in %+v", c, d.name, ws.Wire, ws.Blocks)
			case fixed && d.name == "random" && ws.Blocks.S2+ws.Blocks.Zstd != 0:
				t.Errorf("%s, %s: random bytes compressed", c, d.name)
			}
		}
	}
}

// adaptive sends data through an Auto Writer over four streams sharing a
// link of rate bytes/s (unlimited if 0) for about d per part, and returns
// the Writer's stats and Auto's choice after each part.
func adaptive(t *testing.T, rate float64, d time.Duration, parts ...[]byte) (WriterStats, []codec) {
	pairs := newPairs(t)
	l := newRateLink(rate)
	var wc, rc []net.Conn
	for range 4 {
		a, b := pairs.tcp()
		if rate > 0 {
			a = l.conn(a)
		}
		wc, rc = append(wc, a), append(rc, b)
	}
	w, r := NewWriter(Config{Compression: CompressAuto}, wc...), NewReader(Config{}, rc...)
	defer r.Close()
	w.auto.mu.Lock()
	w.auto.trace = func(format string, args ...any) { t.Logf(format, args...) }
	w.auto.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, r); done <- err }()
	var modes []codec
	start := time.Now()
	sent := 0
	for _, p := range parts {
		for end := time.Now().Add(d); time.Now().Before(end); sent += 64 << 10 {
			if _, err := w.Write(p[sent%len(p):][:64<<10]); err != nil {
				t.Fatal(err)
			}
		}
		w.auto.mu.Lock()
		modes = append(modes, w.auto.mode)
		w.auto.mu.Unlock()
		t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), w.Stats().Adaptive)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done, "reader"); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("%.1f MB/s of stream, %.1f on the wire; blocks %+v", float64(sent)/time.Since(start).Seconds()/1e6,
		float64(st.Wire)/time.Since(start).Seconds()/1e6, st.Blocks)
	return st, modes
}

// Random bytes on a fast network (loopback): Auto never sends a block
// compressed.
func TestAutoRandomFastNetwork(t *testing.T) {
	random := randomData(rand.New(rand.NewPCG(13, 14)), 16<<20)
	st, modes := adaptive(t, 0, time.Second, random)
	if st.Blocks.S2+st.Blocks.Zstd != 0 || modes[0] != codecNone {
		t.Errorf("compressed random bytes: %+v, choosing %s", st.Blocks, modes[0])
	}
}

// Text, then random bytes, then text again on a slow network: Auto
// compresses the text, stops for the random bytes, starts again.
func TestAutoSlowNetwork(t *testing.T) {
	text, random := TextData(15, 16<<20), randomData(rand.New(rand.NewPCG(15, 16)), 16<<20)
	st, modes := adaptive(t, 10e6, 1200*time.Millisecond, text, random, text)
	if modes[0] == codecNone || modes[1] != codecNone || modes[2] == codecNone {
		t.Errorf("chose %v, want a codec, none, a codec", modes)
	}
	if st.Blocks.S2+st.Blocks.Zstd < st.Blocks.None {
		t.Errorf("blocks %+v: most should be compressed", st.Blocks)
	}
}
