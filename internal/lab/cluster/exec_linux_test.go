package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/cluster"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
)

// execHosts are the MPI hosts of TestClusterExec on grid6, launcher
// first: four sites, g5k's node non-routed, hiroshi's behind its ssh-only
// firewall, the NATed desktop.
var execHosts = []string{"das3v-n1", "g5k-n1", "hiroshi-n1", "desktop-pc"}

// Issue 21 on grid6, with no ssh daemon or ssh key anywhere: every host
// runs a gridlink node with the virtual network and the exec service,
// the node agents of the MPI hosts under their NODE.grid host names and
// the cluster's hosts file (cluster.HostWrap), so that what exec starts
// runs as on that host. A grid user (alice, mapped by every grid-mapfile
// to a local account) runs her own agent on das3v-n1, and as that account
// there launches MPI jobs whose daemons gridlink exec starts: Open MPI
// (plm_rsh_agent gridlink exec, no tree spawn) and MPICH (hydra's ssh
// launcher with -launcher-exec gridlink-exec), one rank on each of four
// sites, the ranks talking over the virtual network: allreduce right,
// each target's log naming the daemon it ran for her. Then Slurm: munged,
// slurmctld on g5k-fe and slurmd on g5k-n1 and g5k-n2 (non-routed), and
// gridlink submit from das3v-n1 queues a job there that runs and whose
// output comes back; gridlink jobs follows it. Then a two-site job: one
// Slurm cluster over the virtual network, slurmctld on g5k-fe and slurmd
// on g5k-n1 and hiroshi-n1, a job with a task on each (slurmTwoSites).
func TestClusterExec(t *testing.T) {
	need(t, append(append(append([]string{}, cluster.MPIPackages...), cluster.MPICHPackages...), cluster.SlurmPackages...)...)
	acct := newAccount(t)
	work := openTempDir(t)
	// the binary where the account can run it, and gridlink-exec beside it
	bin := filepath.Join(work, "gridlink")
	copyFile(t, gridlinkBin(t), bin, 0o755)
	execLink := filepath.Join(work, "gridlink-exec")
	if err := os.Symlink(bin, execLink); err != nil {
		t.Fatal(err)
	}
	hostsFile := cluster.HostsFileIn(work)
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mapfile := filepath.Join(work, "grid-mapfile")
	if err := os.WriteFile(mapfile, []byte(fmt.Sprintf("\"/O=%s/OU=user/CN=alice\" %s\n", lab.CAName, acct.name)), 0o644); err != nil {
		t.Fatal(err)
	}

	topo := labtest.Up(t, "grid6", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	host := func(id string) *topology.Host { return labtest.Host(t, topo, id) }
	fe, nodes := host("g5k-fe"), []*topology.Host{host("g5k-n1"), host("g5k-n2")}
	slurm, err := cluster.PrepareSlurm(cluster.SlurmConfig{Name: "g5k", Dir: openTempDir(t),
		Controller: cluster.Host{Name: fe.ID(), Addr: lanAddr(t, fe), NS: lab.HostNS(fe)},
		Nodes: []cluster.Host{
			{Name: nodes[0].ID(), Addr: lanAddr(t, nodes[0]), NS: lab.HostNS(nodes[0])},
			{Name: nodes[1].ID(), Addr: lanAddr(t, nodes[1]), NS: lab.HostNS(nodes[1])},
		}})
	if err != nil {
		t.Fatal(err)
	}

	var hs []*topology.Host
	for _, n := range execHosts {
		hs = append(hs, host(n))
	}
	o, err := matrix.StartOverlayWith(ctx, topo, bin, matrix.Options{VIP: true, Hosts: append(hs, fe),
		NodeArgs: func(*topology.Host) []string { return []string{"--allow-exec", "--grid-mapfile", mapfile} },
		Wrap: func(h *topology.Host) []string {
			if h == fe {
				return cluster.SlurmWrap(h.ID(), slurm.Etc(), slurm.HostsFile())
			}
			return cluster.HostWrap(h.ID()+".grid", hostsFile)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	var hosts []cluster.Host
	var names []string
	for _, v := range o.VIPs() {
		if v.Host != fe {
			hosts = append(hosts, cluster.Host{Name: v.Name + ".grid", Addr: v.V4, NS: lab.HostNS(v.Host)})
			names = append(names, v.Name+".grid")
		}
	}
	c, err := cluster.Start(ctx, cluster.Config{Hosts: hosts, Dir: work, Net: gridlink.DefaultVIPPrefix4, Agent: []string{execLink}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// alice's own agent on das3v-n1, run by the account, at its default
	// control socket (where gridlink exec finds it)
	x := &userRun{t: t, bin: bin, acct: acct, c: c, launcher: names[0]}
	x.agent(ctx, o, hs[0])
	for _, n := range append(append([]string{}, names[1:]...), fe.ID()) {
		testwait.Until(t, "gridlink exec "+n+" hostname, from "+names[0], 2*time.Minute, func() bool {
			code, out, _ := x.exec(ctx, nil, n, "hostname")
			return code == 0 && strings.TrimSpace(out) == n
		})
	}

	// a subtest that fails shows what the gridlink agents said
	agentLogs := func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				for _, h := range append(append([]*topology.Host{}, hs...), fe) {
					log, _ := os.ReadFile(matrix.LogFile(h, "node"))
					t.Logf("--- the gridlink agent on %s (last lines) ---\n%s", h.ID(), tail(log, 2500))
				}
			}
		})
	}
	// each subtest has a time of its own: one that runs out does not
	// leave the next none (a hung MPI job once did, and Slurm's start
	// then failed at once, blamed on munged)
	subCtx := func(t *testing.T, d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	jobLogged := func(t *testing.T, what string) {
		t.Helper()
		for _, h := range hs[1:] {
			log, _ := os.ReadFile(matrix.LogFile(h, "node"))
			if !bytes.Contains(log, []byte("runs as "+acct.name)) || !bytes.Contains(log, []byte(what)) {
				t.Errorf("%s's log names no run of %s as %s:\n%s", h.ID(), what, acct.name, tail(log, 3000))
			}
		}
	}
	t.Run("OpenMPI", func(t *testing.T) {
		agentLogs(t)
		ctx := subCtx(t, 2*time.Minute)
		peers, stop := watchRankPeers(ctx, hosts)
		start := time.Now()
		r, warnings, err := c.MPIRun(ctx, cluster.MPIJob{Launcher: names[0], Hosts: names, User: acct.name, MaxBytes: 256 << 10, Vector: 4096})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Open MPI across %d sites, daemons by gridlink exec, in %v", len(names), time.Since(start).Round(time.Millisecond))
		if warnings != "" {
			t.Logf("mpirun's standard error:\n%s", warnings)
		}
		if err := r.Check(names); err != nil {
			t.Fatal(err)
		}
		t.Logf("ping-pong:\n%s", r.Table())
		jobLogged(t, "orted")
		vaddr := map[netip.Addr]bool{}
		for _, h := range hosts {
			vaddr[h.Addr] = true
		}
		for _, h := range hosts {
			for p, local := range peers[h.NS] {
				if local != h.Addr || !vaddr[p] {
					t.Errorf("%s: a rank's connection %s <-> %s is not between virtual addresses of the cluster", h.Name, local, p)
				}
			}
		}
		if len(peers[hosts[0].NS]) < len(hosts)-1 {
			t.Errorf("rank 0 on %s saw connections from %v, want every other rank's virtual address", hosts[0].Name, peers[hosts[0].NS])
		}
	})
	t.Run("MPICH", func(t *testing.T) {
		agentLogs(t)
		ctx := subCtx(t, 3*time.Minute)
		start := time.Now()
		job := cluster.MPIJob{MPI: cluster.MPICH, Launcher: names[0], Hosts: names, User: acct.name,
			MaxBytes: 256 << 10, Vector: 4096, Iface: gridlink.DefaultVIPDevice, Timeout: 50 * time.Second,
			ResultGrace: 15 * time.Second}
		r, warnings, err := c.MPIRun(ctx, job)
		for try := 1; try < 3; try++ {
			te := (*cluster.TimeoutError)(nil)
			if !errors.As(err, &te) || r == nil || r.Check(names) != nil {
				break
			}
			// Every rank computed and printed the right result, then one
			// hung in MPI_Finalize: Debian's MPICH 4.0 on UCX 1.13 races
			// its endpoint closes when one rank's path is slower (docs/mpi.md,
			// about 1 run in 8 here), not gridlink's doing. Up to three
			// runs; three hangs fail.
			t.Logf("MPICH hung in MPI_Finalize after a correct result (its finalize race, docs/mpi.md); running the job once more:\n%v", err)
			start = time.Now()
			r, warnings, err = c.MPIRun(ctx, job)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MPICH across %d sites, proxies by gridlink-exec, in %v", len(names), time.Since(start).Round(time.Millisecond))
		if warnings != "" {
			t.Logf("mpiexec's standard error:\n%s", warnings)
		}
		if err := r.Check(names); err != nil {
			t.Fatal(err)
		}
		t.Logf("ping-pong:\n%s", r.Table())
		jobLogged(t, "hydra_pmi_proxy")
	})
	t.Run("Slurm", func(t *testing.T) {
		agentLogs(t)
		ctx := subCtx(t, 3*time.Minute)
		defer slurm.Close()
		if err := slurm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// stage-in by gridlink cp: a transfer service of the account's
		// home at the frontend, a copy from das3v-n1 with alice's proxy
		stageIn(ctx, t, o, bin, fe, hs[0], acct, "input.txt", "staged by gridlink cp\n")
		script := filepath.Join(x.dir(), "job.sh")
		if err := os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH --job-name=issue21\necho \"job $SLURM_JOB_ID on $(hostname) as $(id -un)\"\ncat input.txt\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := x.run(ctx, nil, "submit", fe.ID(), "-N", "1", script)
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("gridlink submit: %d %q %q\n%s", code, out, errs, slurm.Logs())
		}
		var job gridlink.Job
		testwait.Until(t, "job "+id+" completed, as gridlink jobs shows it", time.Minute, func() bool {
			code, out, _ := x.run(ctx, nil, "jobs", "--json", fe.ID(), id)
			var jobs []gridlink.Job
			if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 {
				return false
			}
			job = jobs[0]
			return job.State == "COMPLETED" || job.State == "FAILED"
		})
		if job.ID != id || job.State != "COMPLETED" || job.Name != "issue21" || job.User != acct.name || (job.Nodes != nodes[0].ID() && job.Nodes != nodes[1].ID()) {
			t.Errorf("gridlink jobs: %+v; want job %s COMPLETED on a node of g5k, as %s", job, id, acct.name)
		}
		code, out, errs = x.exec(ctx, nil, fe.ID(), "cat", "slurm-"+id+".out")
		if want := fmt.Sprintf("job %s on %s as %s\nstaged by gridlink cp\n", id, job.Nodes, acct.name); code != 0 || out != want {
			t.Errorf("the job's output: %d %q %q; want %q\n%s", code, out, errs, want, slurm.Logs())
		}
		code, _, errs = x.run(ctx, nil, "submit", fe.ID(), "--no-such-option", script)
		if code == 0 || !strings.Contains(errs, "sbatch at "+fe.ID()) {
			t.Errorf("a refused sbatch: exit %d, %q; want its words", code, errs)
		}
	})
	// after Slurm (whose cluster it closed): one cluster across two sites
	// on the virtual network, the frontend's configuration replaced
	t.Run("SlurmTwoSites", func(t *testing.T) {
		agentLogs(t)
		slurmTwoSites(subCtx(t, 7*time.Minute), t, twoSites{o: o, x: x, fe: fe, nodes: []*topology.Host{nodes[0], host("hiroshi-n1")}, etc: slurm.Etc()})
	})
}

// stageIn copies a file of content into the account's home at the
// frontend fe with gridlink cp from host from, as alice: gridlink serve
// runs there as the account (so the job's files are its own), serving
// its home.
func stageIn(ctx context.Context, t *testing.T, o *matrix.Overlay, bin string, fe, from *topology.Host, acct account, name, content string) {
	t.Helper()
	i, err := o.Issue(fe.ID() + "-data")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(i.Key, acct.uid, acct.gid); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"netns", "exec", lab.HostNS(fe), "setpriv", "--reuid=" + strconv.Itoa(acct.uid), "--regid=" + strconv.Itoa(acct.gid), "--clear-groups",
		bin, "serve", "--name", fe.ID() + "-data", "--hub", matrix.HubAddr(fe), "--root", acct.home}, i.Args()...)
	serve := exec.Command("ip", args...)
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	serve.Stdout, serve.Stderr = logf, logf
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-serve.Process.Pid, syscall.SIGTERM); _ = serve.Wait() })
	testwait.Until(t, "gridlink serve on "+fe.ID(), 20*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte("serving"))
	})
	src := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cred, err := o.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	cp := append(append([]string{"netns", "exec", lab.HostNS(from), bin, "cp", "--quiet", "--hub", matrix.HubAddr(from)}, cred.Args()...), src, fe.ID()+"-data:"+name)
	if out, err := exec.CommandContext(ctx, "ip", cp...).CombinedOutput(); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("gridlink cp %s to %s: %v %s\nserve:\n%s", name, fe.ID(), err, out, b)
	}
	if b, err := os.ReadFile(filepath.Join(acct.home, name)); err != nil || string(b) != content {
		t.Fatalf("staged %s at %s: %q %v", name, fe.ID(), b, err)
	}
}

// lanAddr is h's address on its site's lan.
func lanAddr(t *testing.T, h *topology.Host) netip.Addr {
	for _, ifc := range h.Ifaces {
		if ifc.Net.Name == "lan" {
			return ifc.Addr
		}
	}
	t.Fatalf("%s has no lan address", h.ID())
	return netip.Addr{}
}

// account is a local account made for a test (the lab's hosts share this
// machine's /etc/passwd), removed when it ends.
type account struct {
	name     string
	uid, gid int
	home     string
}

func newAccount(t *testing.T) account {
	t.Helper()
	a := account{name: fmt.Sprintf("glclu%d", os.Getpid()%1000000), home: openTempDir(t)}
	if out, err := exec.Command("useradd", "-M", "-U", "-d", a.home, "-s", "/bin/sh", a.name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", a.name).Run() })
	for _, f := range []struct {
		flag string
		v    *int
	}{{"-u", &a.uid}, {"-g", &a.gid}} {
		out, err := exec.Command("id", f.flag, a.name).Output()
		if err == nil {
			*f.v, err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(a.home, a.uid, a.gid); err != nil {
		t.Fatal(err)
	}
	return a
}

// openTempDir is a t.TempDir() that every account may enter (its parents
// too, up to the temporary directory).
func openTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		_ = os.Chmod(p, 0o755)
	}
	return d
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, mode)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// userRun runs gridlink commands as the test's account on the launcher
// host, as the cluster runs everything there (its host name, the hosts
// file), with a login environment of the account's own.
type userRun struct {
	t        *testing.T
	bin      string
	acct     account
	c        *cluster.Cluster
	launcher string
}

// dir is a directory of the account's (its home).
func (x *userRun) dir() string { return x.acct.home }

func (x *userRun) command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{"setpriv", "--reuid=" + strconv.Itoa(x.acct.uid), "--regid=" + strconv.Itoa(x.acct.gid), "--init-groups",
		"env", "-i", "HOME=" + x.acct.home, "USER=" + x.acct.name, "PATH=/usr/bin:/bin", x.bin}, args...)
	cmd, err := x.c.Command(ctx, x.launcher, argv...)
	if err != nil {
		x.t.Fatal(err)
	}
	cmd.Dir = x.acct.home
	return cmd
}

// run runs gridlink ARGS with stdin, returning its exit code and output.
func (x *userRun) run(ctx context.Context, stdin io.Reader, args ...string) (int, string, string) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := x.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		errb.WriteString(fmt.Sprintf("\n(gridlink %s: killed, no end after 90s)", strings.Join(args, " ")))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		x.t.Fatalf("gridlink %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// exec runs gridlink exec HOST ARGS.
func (x *userRun) exec(ctx context.Context, stdin io.Reader, host string, args ...string) (int, string, string) {
	return x.run(ctx, stdin, append([]string{"exec", host}, args...)...)
}

// agent starts alice's agent on h, run by the account with a proxy of
// the lab CA, at the account's default control socket, and waits until
// it is attached.
func (x *userRun) agent(ctx context.Context, o *matrix.Overlay, h *topology.Host) {
	t := x.t
	i, err := o.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(x.acct.home, "alice")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"node", "--name", "alice-" + h.ID(), "--hub", matrix.HubAddr(h)}
	for _, f := range []struct{ flag, from string }{{"--ca", i.CA}, {"--crl", i.CRL}, {"--proxy", i.Proxy}} {
		to := filepath.Join(dir, filepath.Base(f.from))
		copyFile(t, f.from, to, 0o600)
		if err := os.Chown(to, x.acct.uid, x.acct.gid); err != nil {
			t.Fatal(err)
		}
		args = append(args, f.flag, to)
	}
	if err := os.Chown(dir, x.acct.uid, x.acct.gid); err != nil {
		t.Fatal(err)
	}
	cmd := x.command(context.Background(), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(t.TempDir(), "alice-agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		// the account's default control socket's directory (the account
		// goes when the test ends; its uid may come back)
		_ = os.RemoveAll(filepath.Join(os.TempDir(), fmt.Sprintf("gridlink-%d", x.acct.uid)))
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("alice's agent on %s:\n%s", h.ID(), tail(b, 3000))
		}
	})
	testwait.Until(t, "alice's agent on "+h.ID()+" attached", 20*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte("attached to hub")) || ctx.Err() != nil
	})
}
