package portmap

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// fakeGateway is a client whose grants the test sets: what renewal,
// retries and deletion do with them is the logic under test. It never
// touches the network.
type fakeGateway struct {
	mu       sync.Mutex
	proto    Protocol
	life     time.Duration // granted lease
	port     uint16        // granted external port; 0 grants the one asked for
	fail     error         // returned by add while set
	adds     []uint16      // external ports asked for, in order
	removed  []uint16
	closedAt int // len(adds) when remove was called
}

func (f *fakeGateway) protocol() Protocol { return f.proto }
func (f *fakeGateway) gateway() string    { return "fake" }
func (f *fakeGateway) local() netip.Addr  { return netip.MustParseAddr("10.0.0.7") }

func (f *fakeGateway) add(_ context.Context, internal, ext uint16, lifetime time.Duration) (grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adds = append(f.adds, ext)
	if f.fail != nil {
		return grant{}, f.fail
	}
	p := f.port
	if p == 0 {
		p = ext
	}
	return grant{external: netip.AddrPortFrom(netip.MustParseAddr("198.51.100.9"), p), lifetime: f.life}, nil
}

func (f *fakeGateway) remove(_ context.Context, internal, ext uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, ext)
	f.closedAt = len(f.adds)
	return f.fail
}

func (f *fakeGateway) set(fn func(*fakeGateway)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeGateway) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.adds)
}

// The timer tests run in a synctest bubble: time is synthetic, so a lease
// of 200 ms is renewed at exactly 100, 200, 300 and 400 ms and the test
// takes no real time.
func TestRenewsAtHalfLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeGateway{proto: NATPMP, life: 200 * time.Millisecond}
		m, err := newMapping(context.Background(), Config{ExternalPort: 9000}, f, 7000)
		if err != nil {
			t.Fatal(err)
		}
		st := m.Status()
		if st.External.Port() != 9000 || st.Internal.String() != "10.0.0.7:7000" || st.Protocol != NATPMP || st.Lifetime != 200*time.Millisecond {
			t.Fatalf("status %+v", st)
		}
		time.Sleep(450 * time.Millisecond)
		if r := m.Status().Renewals; r != 4 {
			t.Errorf("%d renewals of a 200ms lease in 450ms, want 4: one every half lease", r)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if st := m.Status(); st.Renewals != f.count()-1 || len(f.removed) != 1 || f.removed[0] != 9000 {
			t.Errorf("requests %v (%d renewals), removed %v", f.adds, st.Renewals, f.removed)
		}
		for _, p := range f.adds {
			if p != 9000 {
				t.Errorf("asked for external ports %v; every renewal should ask for the held one", f.adds)
				break
			}
		}
		time.Sleep(time.Hour)
		if a := f.count(); a != f.closedAt {
			t.Errorf("%d requests after Close", a-f.closedAt)
		}
		if err := m.Close(); err != nil || len(f.removed) != 1 {
			t.Errorf("second Close: %v, %d deletions", err, len(f.removed))
		}
	})
}

func TestRenewalFailureAndChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeGateway{proto: UPnP, life: 100 * time.Millisecond}
		var mu sync.Mutex
		var changes []Status
		cfg := Config{OnChange: func(s Status) { mu.Lock(); changes = append(changes, s); mu.Unlock() }}
		m, err := newMapping(context.Background(), cfg, f, 7000)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		changed := func(n int) func() bool {
			return func() bool { mu.Lock(); defer mu.Unlock(); return len(changes) >= n }
		}
		testwait.Until(t, "a renewal", 5*time.Second, func() bool { return m.Status().Renewals >= 1 })
		mu.Lock()
		if len(changes) != 0 {
			t.Errorf("OnChange after a renewal that changed nothing: %+v", changes)
		}
		mu.Unlock()

		f.set(func(f *fakeGateway) { f.fail = errors.New("gateway gone") })
		testwait.Until(t, "OnChange with the failure", 5*time.Second, changed(1))
		if st := m.Status(); st.Err == nil || !strings.Contains(st.Err.Error(), "gateway gone") || st.External.Port() != 7000 {
			t.Errorf("after a failed renewal: %+v", st)
		}
		// the gateway comes back, granting another port (its lease ran out).
		f.set(func(f *fakeGateway) { f.fail = nil; f.port = 7500 })
		testwait.Until(t, "OnChange with the recovery on port 7500", 5*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			last := changes[len(changes)-1]
			return last.Err == nil && last.External.Port() == 7500
		})
		if st := m.Status(); st.External.Port() != 7500 || st.Err != nil {
			t.Errorf("status after recovery %+v", st)
		}
	})
}

func TestPermanentIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeGateway{proto: UPnP, life: 0}
		m, err := newMapping(context.Background(), Config{}, f, 7000)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if st := m.Status(); !st.Expires.IsZero() || st.Renewals != 0 {
			t.Errorf("permanent mapping: %+v", st)
		}
		f.set(func(f *fakeGateway) { f.fail = errors.New("refused") })
		err = m.Close()
		if err == nil || !strings.Contains(err.Error(), "portmap: delete upnp-igd mapping 198.51.100.9:7000") || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Close error %v", err)
		}
		if a := f.count(); a != 1 {
			t.Errorf("%d requests for a permanent mapping, want 1", a)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct{ left, life, want time.Duration }{
		{30 * time.Second, time.Minute, 15 * time.Second},
		{time.Second, time.Minute, time.Second},
		{0, time.Hour, 30 * time.Second},
		{-time.Minute, 4 * time.Second, 2 * time.Second},
		{-time.Minute, time.Second, time.Second},
	} {
		if got := retryAfter(c.left, c.life); got != c.want {
			t.Errorf("retryAfter(%v, %v) = %v, want %v", c.left, c.life, got, c.want)
		}
	}
}

// Map asks every protocol at once, maps with the first gateway to answer,
// falls back on the next when that one refuses, and says what each said.
func TestMapRaceAndFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		saved := discoverers
		t.Cleanup(func() { discoverers = saved })
		slow := &fakeGateway{proto: UPnP, life: time.Hour}
		fast := &fakeGateway{proto: NATPMP, life: time.Hour, fail: errors.New("NAT-PMP gateway fake: refused")}
		discoverers = map[Protocol]func(context.Context, Config) (client, error){
			NATPMP: func(context.Context, Config) (client, error) { return fast, nil },
			UPnP: func(ctx context.Context, _ Config) (client, error) {
				select {
				case <-time.After(50 * time.Millisecond):
					return slow, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		}
		m, err := Map(context.Background(), Config{}, 7000)
		if err != nil {
			t.Fatal(err)
		}
		if p := m.Protocol(); p != UPnP {
			t.Errorf("mapped by %s; NAT-PMP refused, so want UPnP", p)
		}
		m.Close()

		fast.set(func(f *fakeGateway) { f.fail = nil })
		m, err = Map(context.Background(), Config{}, 7000)
		if err != nil || m.Protocol() != NATPMP {
			t.Fatalf("Map = %v, %v; want the first to answer, NAT-PMP", m, err)
		}
		m.Close()

		discoverers[UPnP] = func(context.Context, Config) (client, error) {
			return nil, errors.New("UPnP: no IGD answered on the LAN within 2s")
		}
		fast.set(func(f *fakeGateway) { f.fail = errors.New("NAT-PMP gateway fake: no answer within 2s") })
		_, err = Map(context.Background(), Config{}, 7000)
		var me *MapError
		if !errors.As(err, &me) || len(me.Errs) != 2 || !strings.Contains(err.Error(), "no gateway mapped tcp port 7000: ") ||
			!strings.Contains(err.Error(), "NAT-PMP gateway fake: no answer within 2s") || !strings.Contains(err.Error(), "UPnP: no IGD answered") {
			t.Errorf("Map error %v", err)
		}
		_, err = Map(context.Background(), Config{Protocols: []Protocol{UPnP}}, 7000)
		if !errors.As(err, &me) || len(me.Errs) != 1 {
			t.Errorf("Map with UPnP only: %v", err)
		}
		if _, err := Map(context.Background(), Config{Protocols: []Protocol{"pcp"}}, 7000); !errors.Is(err, ErrNoProtocol) {
			t.Errorf("Map with no known protocol: %v", err)
		}
		if _, err := Map(context.Background(), Config{}, 0); err == nil {
			t.Error("Map of port 0 succeeded")
		}
	})
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	if c.timeout() != 2*time.Second || c.lifetime() != time.Hour || c.description() != "gridlink" || !c.wants(NATPMP) || !c.wants(UPnP) {
		t.Errorf("zero Config: timeout %v lifetime %v description %q", c.timeout(), c.lifetime(), c.description())
	}
	c = Config{Lifetime: time.Millisecond, Protocols: []Protocol{UPnP}}
	if c.lifetime() != time.Second || c.wants(NATPMP) {
		t.Errorf("Config %+v: lifetime %v, wants NAT-PMP %v", c, c.lifetime(), c.wants(NATPMP))
	}
}
