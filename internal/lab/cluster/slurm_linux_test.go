package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/cluster"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
)

// twoSites is what slurmTwoSites runs on: TestClusterExec's overlay, with
// the virtual network on every host, alice's own agent on the launcher,
// the frontend whose agent runs under SlurmWrap with etc as /etc/slurm.
type twoSites struct {
	o     *matrix.Overlay
	x     *userRun
	fe    *topology.Host   // the controller: g5k-fe
	nodes []*topology.Host // one node of each site
	etc   string           // the frontend's /etc/slurm (the site's cluster's, closed by now)
}

// A two-site job (issue 21): one Slurm cluster whose controller and
// daemons reach each other over gridlink's virtual network, slurmctld on
// g5k-fe and slurmd on g5k-n1 (non-routed) and hiroshi-n1 (behind its
// ssh-only firewall), every Slurm address a virtual one (NODE.grid's).
// gridlink submit from das3v-n1 queues a two-node job at g5k-fe whose
// srun runs one task on each site's node; gridlink jobs shows it
// COMPLETED on both, its output (a line from each task, under its node's
// name) comes back through exec, and g5k-n1 has no route to hiroshi-n1's
// own address: the tasks' traffic crossed the firewalls on the virtual
// network. Then an MPI job (MPICH, hydra's proxies started by srun in the
// allocation) with a rank on each site's node: allreduce right.
func slurmTwoSites(ctx context.Context, t *testing.T, s twoSites) {
	vip := func(h *topology.Host) cluster.Host {
		v, ok := s.o.VIP(h)
		if !ok {
			t.Fatalf("%s has no virtual address", h.ID())
		}
		return cluster.Host{Name: h.ID(), Addr: v.V4, NS: lab.HostNS(h)}
	}
	cfg := cluster.SlurmConfig{Name: "grid", Controller: vip(s.fe), Dir: openTempDir(t), Etc: s.etc}
	for _, n := range s.nodes {
		cfg.Nodes = append(cfg.Nodes, vip(n))
	}
	slurm, err := cluster.PrepareSlurm(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer slurm.Close()
	if err := slurm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("Slurm's logs:\n%s", slurm.Logs())
		}
	}()

	script := filepath.Join(s.x.dir(), "two-sites.sh")
	job := "#!/bin/sh\n#SBATCH --job-name=two-sites\nsrun --ntasks-per-node=1 sh -c 'echo \"task $SLURM_PROCID of $SLURM_NTASKS on $(hostname) as $(id -un)\"'\n"
	if err := os.WriteFile(script, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := s.x.run(ctx, nil, "submit", s.fe.ID(), "-N", fmt.Sprint(len(s.nodes)), script)
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("gridlink submit: %d %q %q", code, out, errs)
	}
	var j gridlink.Job
	testwait.Until(t, "job "+id+" finished, as gridlink jobs shows it", 2*time.Minute, func() bool {
		code, out, _ := s.x.run(ctx, nil, "jobs", "--json", s.fe.ID(), id)
		var jobs []gridlink.Job
		if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 {
			return false
		}
		j = jobs[0]
		return j.State == "COMPLETED" || j.State == "FAILED" || j.State == "CANCELLED" || j.State == "TIMEOUT" || j.State == "NODE_FAIL"
	})
	var names []string
	for _, n := range s.nodes {
		names = append(names, n.ID())
		if !strings.Contains(j.Nodes, n.ID()) {
			t.Errorf("gridlink jobs: the job's nodes %q lack %s", j.Nodes, n.ID())
		}
	}
	if j.ID != id || j.State != "COMPLETED" || j.Name != "two-sites" || j.User != s.x.acct.name {
		t.Errorf("gridlink jobs: %+v; want job %s COMPLETED as %s", j, id, s.x.acct.name)
	}
	code, out, errs = s.x.exec(ctx, nil, s.fe.ID(), "cat", "slurm-"+id+".out")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	var want []string
	for i, n := range names {
		want = append(want, fmt.Sprintf("task %d of %d on %s as %s", i, len(names), n, s.x.acct.name))
	}
	if code != 0 || strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the two-site job's output: %d %q %q; want the lines %q", code, out, errs, want)
	}
	t.Logf("two-site job %s at %s: %s on %s; its output:\n%s", id, s.fe.ID(), j.State, j.Nodes, strings.TrimSpace(out))

	// an MPI job on the same allocation's kind: MPICH's mpiexec.hydra in
	// the batch script launches its proxies with srun (hydra's slurm
	// launcher, the nodes from the allocation), one rank on each site's
	// node, the ranks talking over the virtual network's device
	mpiDir := filepath.Join(s.x.dir(), "mpi-two-sites")
	if err := os.MkdirAll(mpiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog, err := cluster.BuildMPICH(ctx, mpiDir)
	if err != nil {
		t.Fatal(err)
	}
	mpiScript := filepath.Join(s.x.dir(), "two-sites-mpi.sh")
	// a minute's limit: MPICH's finalize race (docs/mpi.md) can leave a
	// rank spinning after the result; Slurm then ends the job (TIMEOUT)
	job = fmt.Sprintf("#!/bin/sh\n#SBATCH --job-name=two-sites-mpi\n#SBATCH --time=1\nexec mpiexec.hydra -launcher slurm -n %d -ppn 1 -iface %s -genv UCX_NET_DEVICES %s -genv UCX_TLS self,tcp %s --max-bytes 65536 --vector 4096\n",
		len(names), gridlink.DefaultVIPDevice, gridlink.DefaultVIPDevice, prog)
	if err := os.WriteFile(mpiScript, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	var mpiID string
	// submitMPI runs the job once and says whether it hung in MPICH's
	// finalize race: every rank's result printed and right, then the job
	// still running finalizeGrace later (or ended by Slurm's limit). Such
	// a job is cancelled at once rather than left to Slurm's minute.
	const finalizeGrace = 20 * time.Second
	submitMPI := func() (raced bool) {
		code, out, errs = s.x.run(ctx, nil, "submit", s.fe.ID(), "-N", fmt.Sprint(len(names)), mpiScript)
		mpiID = strings.TrimSpace(out)
		if code != 0 || mpiID == "" {
			t.Fatalf("gridlink submit of the MPI job: %d %q %q", code, out, errs)
		}
		var resultAt time.Time
		testwait.Until(t, "MPI job "+mpiID+" finished, as gridlink jobs shows it", 3*time.Minute, func() bool {
			code, out, _ := s.x.run(ctx, nil, "jobs", "--json", s.fe.ID(), mpiID)
			var jobs []gridlink.Job
			if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 {
				return false
			}
			j = jobs[0]
			switch j.State {
			case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL":
				return true
			case "RUNNING":
				if _, o, _ := s.x.exec(ctx, nil, s.fe.ID(), "cat", "slurm-"+mpiID+".out"); resultAt.IsZero() {
					if r, err := cluster.ParseMPIResult([]byte(o)); err == nil && r.Check(names) == nil {
						resultAt = time.Now()
					}
				} else if time.Since(resultAt) > finalizeGrace {
					raced = true
					if c, o, e := s.x.exec(ctx, nil, s.fe.ID(), "scancel", mpiID); c != 0 {
						t.Logf("scancel %s: %d %q %q", mpiID, c, o, e)
					}
				}
			}
			return false
		})
		code, out, errs = s.x.exec(ctx, nil, s.fe.ID(), "cat", "slurm-"+mpiID+".out")
		r, err := cluster.ParseMPIResult([]byte(out))
		return (raced || j.State == "TIMEOUT") && err == nil && r.Check(names) == nil
	}
	// every rank's result right, then a rank hung in MPI_Finalize: MPICH's
	// finalize race (docs/mpi.md: about 1 run in 8 on these paths), not
	// gridlink's doing. Up to three submissions; three hangs fail.
	for try := 1; submitMPI() && try < 3; try++ {
		t.Logf("MPI job %s: a correct result, then still running %v later (MPICH's finalize race, docs/mpi.md): cancelled (%s); submitting it once more", mpiID, finalizeGrace, j.State)
	}
	if j.State != "COMPLETED" || code != 0 {
		t.Fatalf("the two-site MPI job %s: %+v; its output (%d %q):\n%s", mpiID, j, code, errs, out)
	}
	r, err := cluster.ParseMPIResult([]byte(out))
	if err == nil {
		err = r.Check(names)
	}
	if err != nil {
		t.Fatalf("the two-site MPI job %s: %v\n%s", mpiID, err, out)
	}
	t.Logf("two-site MPI job %s (MPICH, proxies by srun) on %s: allreduce over %d ranks right; ping-pong:\n%s", mpiID, j.Nodes, r.Size, r.Table())

	// without the virtual network the two nodes do not reach each other:
	// g5k-n1 has no route to hiroshi-n1's own address
	if len(s.nodes) == 2 {
		a, b := s.nodes[0], s.nodes[1]
		dial := exec.CommandContext(ctx, "ip", "netns", "exec", lab.HostNS(a), "timeout", "5", "bash", "-c",
			fmt.Sprintf("exec 3<>/dev/tcp/%s/6818", b.PrimaryAddr()))
		if out, err := dial.CombinedOutput(); err == nil {
			t.Errorf("%s reaches %s's address %s on plain IP: the job proves nothing of the virtual network (%s)", a.ID(), b.ID(), b.PrimaryAddr(), out)
		} else {
			t.Logf("%s to %s's own address %s: %v %s", a.ID(), b.ID(), b.PrimaryAddr(), err, strings.TrimSpace(string(out)))
		}
	}
}
