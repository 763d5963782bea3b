package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// grid6Overlay is the grid6 lab and the overlay the package's grid6
// cases share, brought up once by TestGrid6Overlay: hubs on the sites'
// frontends and a node agent on every site's matrix host, as
// matrix.StartOverlay starts them, certified by the lab CA, whose
// revocation list names the outsiders' revoked certificate (set before
// the overlay starts, so that every hub and node reads it); g5k-n1's and
// hiroshi-n1's agents also offer exec (--allow-exec), mapping the users
// their grid-mapfile lists, none until the Exec case writes it.
//
// A case that breaks its lab (kills a hub: TestGrid6HubDies) or runs its
// agents otherwise (TestGrid6VIP: the virtual network) keeps a bring-up
// of its own.
type grid6Overlay struct {
	topo    *topology.Topology
	bin     string
	tbin    string // the testing build, for the outsiders
	o       *matrix.Overlay
	outs    []outsider
	mapDir  string // where mapfile is, a directory every user may enter
	mapfile string // g5k-n1's and hiroshi-n1's grid-mapfile
	start   time.Time

	// pings are the Ping results of GridlinkMatrix by "SRC->DST" (site
	// names): RoutedSetupNoHeadStart's first measurement of those pairs.
	pings map[string]matrix.GridlinkResult
}

// execHosts are the agents of the shared overlay that offer exec.
var execHosts = []string{"g5k-n1", "hiroshi-n1"}

// TestGrid6Overlay runs the grid6 cases that share one overlay, each a
// subtest of its own; the lab comes down when the last ends, failed or
// not. GridlinkMatrix first (its connections are the first the overlay
// makes), Outsiders last (its lax hub links into the overlay while it
// runs).
func TestGrid6Overlay(t *testing.T) {
	g := &grid6Overlay{bin: gridlinkBin(t), pings: map[string]matrix.GridlinkResult{}}
	// the outsiders run a testing build: built before the lab comes up
	g.tbin = testingBin(t)
	g.topo = labtest.Up(t, "grid6", nil)
	g.outs = labOutsiders(t)
	g.mapDir = openDir(t)
	g.mapfile = filepath.Join(g.mapDir, "grid-mapfile")
	if err := os.WriteFile(g.mapfile, []byte("# the Exec case's users come here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g.start = time.Now()
	o, err := matrix.StartOverlayWith(context.Background(), g.topo, g.bin, matrix.Options{NodeArgs: func(h *topology.Host) []string {
		for _, id := range execHosts {
			if h.ID() == id {
				return []string{"--allow-exec", "--grid-mapfile", g.mapfile}
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	g.o = o

	t.Run("GridlinkMatrix", g.gridlinkMatrix)
	t.Run("RoutedSetupNoHeadStart", g.routedSetupNoHeadStart)
	t.Run("DoctorReasons", g.doctorReasons)
	t.Run("Apps", g.apps)
	t.Run("Xfer", g.xfer)
	t.Run("Exec", g.exec)
	t.Run("Outsiders", g.outsiders)
}
