package link

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// TextData returns n bytes of log-like text, the same for the same seed:
// lines with increasing timestamps, levels, components, request paths,
// file paths, addresses, ids and numbers, as a service's log has. It is
// test and benchmark data that compresses about as well as real logs do
// (a repeated line would compress unrealistically well); random ids and
// numbers keep it from compressing much better.
func TextData(seed int64, n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c6f6773))
	g := textGen{rng: rng, t: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC), job: rng.IntN(1 << 20)}
	for range 64 { // a service sees the same clients again and again
		g.clients = append(g.clients, string(g.addr(nil)))
	}
	b := make([]byte, 0, n+256)
	for len(b) < n {
		b = g.line(b)
	}
	return b[:n]
}

type textGen struct {
	rng     *rand.Rand
	t       time.Time
	job     int
	clients []string
}

var (
	textLevels     = []string{"INFO ", "INFO ", "INFO ", "INFO ", "DEBUG", "DEBUG", "WARN ", "ERROR"}
	textComponents = []string{"api.handler", "api.auth", "db.pool", "db.migrate", "storage.gc", "storage.blob", "sched", "cache", "mail.queue", "net.peer"}
	textMethods    = []string{"GET", "GET", "GET", "POST", "PUT", "DELETE"}
	textResources  = []string{"users", "orders", "invoices", "sessions", "items", "reports", "teams"}
	textDirs       = []string{"var", "lib", "gridlink", "blobs", "cache", "tmp", "spool", "data", "archive", "2026"}
	textUsers      = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar"}
	textTables     = []string{"orders", "users", "events", "audit_log", "payments", "sessions"}
	textErrors     = []string{"permission denied", "no such file or directory", "connection reset by peer", "context deadline exceeded", "disk quota exceeded"}
	textStatus     = []int{200, 200, 200, 200, 201, 204, 301, 304, 400, 401, 403, 404, 500, 503}
)

// pick picks from s, the first ones more often (as a few components,
// endpoints and clients make most of a log).
func (g *textGen) pick(s []string) string {
	u := g.rng.Float64()
	return s[int(u*u*float64(len(s)))]
}

func (g *textGen) hex(b []byte, n int) []byte {
	const digits = "0123456789abcdef"
	for range n {
		b = append(b, digits[g.rng.IntN(16)])
	}
	return b
}

func (g *textGen) num(b []byte, n int) []byte { return strconv.AppendInt(b, int64(g.rng.IntN(n)), 10) }

func (g *textGen) ms(b []byte, n int) []byte {
	b = strconv.AppendFloat(b, float64(g.rng.IntN(n*10))/10, 'f', 1, 64)
	return append(b, "ms"...)
}

func (g *textGen) addr(b []byte) []byte {
	b = append(b, "10."...)
	b = g.num(b, 16)
	b = append(b, '.')
	b = g.num(b, 256)
	b = append(b, '.')
	return g.num(b, 256)
}

func (g *textGen) path(b []byte) []byte {
	for range 2 + g.rng.IntN(3) {
		b = append(append(b, '/'), g.pick(textDirs)...)
	}
	b = append(b, '/')
	b = g.hex(b, 2)
	b = append(b, '/')
	return g.hex(b, 12)
}

// line appends one log line.
func (g *textGen) line(b []byte) []byte {
	g.t = g.t.Add(time.Duration(g.rng.ExpFloat64() * float64(3*time.Millisecond)))
	b = g.t.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, ' ')
	b = append(b, g.pick(textLevels)...)
	b = append(b, " ["...)
	b = append(b, g.pick(textComponents)...)
	b = append(b, "] "...)
	switch g.rng.IntN(6) {
	case 0, 1:
		b = append(b, g.pick(textMethods)...)
		b = append(b, " /v1/"...)
		b = append(b, g.pick(textResources)...)
		b = append(b, '/')
		b = g.num(b, 100000)
		if g.rng.IntN(2) == 0 {
			b = append(b, "?limit="...)
			b = g.num(b, 200)
		}
		b = append(b, " status="...)
		b = strconv.AppendInt(b, int64(textStatus[g.rng.IntN(len(textStatus))]), 10)
		b = append(b, " bytes="...)
		b = g.num(b, 50000)
		b = append(b, " dur="...)
		b = g.ms(b, 300)
		b = append(b, " req="...)
		b = g.hex(b, 16)
		b = append(b, " client="...)
		b = append(b, g.pick(g.clients)...)
	case 2:
		b = append(b, "slow query on table "...)
		b = append(b, g.pick(textTables)...)
		b = append(b, ": "...)
		b = g.ms(b, 2000)
		b = append(b, " (rows="...)
		b = g.num(b, 10000)
		b = append(b, ", conn="...)
		b = g.num(b, 64)
		b = append(b, ')')
	case 3:
		b = append(b, "failed to remove "...)
		b = g.path(b)
		b = append(b, ": "...)
		b = append(b, g.pick(textErrors)...)
	case 4:
		b = append(b, "user "...)
		b = append(b, g.pick(textUsers)...)
		b = append(b, " logged in from "...)
		b = append(b, g.pick(g.clients)...)
		b = append(b, " session="...)
		b = g.hex(b, 24)
	default:
		b = append(b, "worker "...)
		b = g.num(b, 16)
		b = append(b, " picked job "...)
		g.job += 1 + g.rng.IntN(3)
		b = strconv.AppendInt(b, int64(g.job), 10)
		b = append(b, " (queue depth "...)
		b = g.num(b, 100)
		b = append(b, ", waited "...)
		b = g.ms(b, 50)
		b = append(b, ')')
	}
	return append(b, '\n')
}
