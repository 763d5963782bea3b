package direct

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Past 64 kinds, a new kind is still logged and summed up by its own
// name: it evicts the least recently used kind (whose held-back lines are
// summed up then), instead of every newcomer sharing one "other" count
// for good.
func TestQuietEvictsLeastRecentlyUsedKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var summaries []string
		q := NewQuiet(1, time.Minute, func(kind QuietKind, more int, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			summaries = append(summaries, fmt.Sprintf("%d more %s", more, kind))
		})
		got := func() []string {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			s := slices.Clone(summaries)
			slices.Sort(s)
			summaries = nil
			return s
		}
		for i := range maxQuietKinds {
			kind := QuietKind(fmt.Sprintf("kind%d", i))
			q.Allow(kind)
			q.Allow(kind) // held back
		}
		q.Allow("kind0") // kind0 is now the most recently used; kind1 the least
		for _, kind := range []QuietKind{"new A", "new B"} {
			if !q.Allow(kind) {
				t.Errorf("the first line of %q, a kind past the 64th, was held back", kind)
			}
			if q.Allow(kind) {
				t.Errorf("the second line of %q passed a burst of 1", kind)
			}
		}
		if s := got(); !slices.Equal(s, []string{"1 more kind1", "1 more kind2"}) {
			t.Errorf("summaries on eviction %q, want the two least recently used kinds: [1 more kind1 1 more kind2]", s)
		}
		time.Sleep(time.Minute)
		s := strings.Join(got(), "; ")
		for _, want := range []string{"1 more new A", "1 more new B", "2 more kind0", "1 more kind63"} {
			if !strings.Contains(s, want) {
				t.Errorf("summaries at the end of the interval %q, want %q among them", s, want)
			}
		}
		if strings.Contains(s, "kind1;") || strings.Contains(s, "other") {
			t.Errorf("summaries at the end of the interval %q: an evicted kind summed up twice, or an \"other\"", s)
		}
	})
}
