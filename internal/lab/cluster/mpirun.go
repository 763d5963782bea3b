package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MPIRun runs job and returns its parsed result and the launcher's
// standard error (Open MPI's or MPICH's warnings, if any).
func (c *Cluster) MPIRun(ctx context.Context, job MPIJob) (*MPIResult, string, error) {
	launcher, pkg := "mpirun.openmpi", "openmpi-bin"
	if job.MPI == MPICH {
		launcher, pkg = "mpiexec.hydra", "mpich"
	} else if job.MPI != "" && job.MPI != OpenMPI {
		return nil, "", fmt.Errorf("cluster: no MPI implementation %q (%s or %s)", job.MPI, OpenMPI, MPICH)
	}
	if _, err := exec.LookPath(launcher); err != nil {
		return nil, "", &MissingError{What: launcher, Package: pkg}
	}
	for _, h := range append([]string{job.Launcher}, job.Hosts...) {
		if _, err := c.Host(h); err != nil {
			return nil, "", err
		}
	}
	dir, as, err := c.jobDir(job.User)
	if err != nil {
		return nil, "", err
	}
	var argv, env []string
	if job.MPI == MPICH {
		if argv, env, err = c.mpichArgs(ctx, dir, job); err != nil {
			return nil, "", err
		}
	} else {
		program, hostfile := filepath.Join(dir, "allreduce.py"), filepath.Join(dir, "hostfile")
		if err := os.WriteFile(program, allreducePy, 0o644); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(hostfile, hostfileText(job.Hosts), 0o644); err != nil {
			return nil, "", err
		}
		argv = c.MPIRunArgs(hostfile, program, job)
	}
	if as != nil {
		as = append(as, env...) // after env -i
	}
	timeout := job.Timeout
	if timeout == 0 {
		timeout = DefaultJobTimeout
	}
	full := append(as, argv...)
	var after *afterOutput
	if job.ResultGrace > 0 {
		after = &afterOutput{grace: job.ResultGrace, done: func(out []byte) bool {
			r, err := ParseMPIResult(out)
			return err == nil && r != nil
		}}
	}
	out, errb, err := runBounded(ctx, timeout, job.Launcher, full, job.User, func(ctx context.Context) (*exec.Cmd, error) {
		cmd, err := c.Command(ctx, job.Launcher, full...)
		if err != nil {
			return nil, err
		}
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		cmd.Env = append(cmd.Env, env...)
		return cmd, nil
	}, after)
	var te *TimeoutError
	if errors.As(err, &te) {
		// a job that hung after printing its result (MPICH's finalize
		// race, docs/mpi.md) still says what it computed: the caller
		// tells the two apart
		r, _ := ParseMPIResult(out)
		return r, string(errb), err
	}
	if err != nil {
		return nil, string(errb), &RunError{Host: job.Launcher, Argv: full, Err: err, Stderr: lastLines(string(errb)+string(out), 30)}
	}
	r, err := ParseMPIResult(out)
	return r, string(errb), err
}

// jobDir is where a job's files go (the scratch directory, or for a
// user's job a directory of its own in the user's home, which the ranks
// on other hosts can read as that user), and the command line prefix
// that runs the launcher as that user (nil for root): setpriv with the
// account's ids and groups, and a login environment of its own.
func (c *Cluster) jobDir(name string) (string, []string, error) {
	if name == "" {
		return c.cfg.Dir, nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return "", nil, fmt.Errorf("cluster: the job's user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp(u.HomeDir, "cluster-mpi-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.Chown(dir, uid, gid)
	}
	if err != nil {
		return "", nil, err
	}
	as := []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups",
		"env", "-i", "HOME=" + u.HomeDir, "USER=" + name, "LOGNAME=" + name, "SHELL=/bin/sh", "PATH=/usr/local/bin:/usr/bin:/bin"}
	return dir, as, nil
}

// mpichArgs builds the C program for MPICH in dir and returns the
// mpiexec.hydra command line of job: one rank per host in the given
// order, each host's proxy launched by the cluster's agent (a program of
// one word, as hydra runs -launcher-exec: a script in dir when the agent
// has more), or ssh with the cluster's configuration; with job.Iface,
// the ranks' traffic on that interface. env is what the launcher's
// environment needs besides.
func (c *Cluster) mpichArgs(ctx context.Context, dir string, job MPIJob) (argv, env []string, err error) {
	bin, err := BuildMPICH(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	argv = []string{"mpiexec.hydra", "-launcher", "ssh"}
	switch {
	case len(c.cfg.Agent) == 1:
		argv = append(argv, "-launcher-exec", c.cfg.Agent[0])
	case len(c.cfg.Agent) > 1:
		script := filepath.Join(dir, "agent")
		var b strings.Builder
		b.WriteString("#!/bin/sh\nexec")
		for _, w := range c.cfg.Agent {
			b.WriteString(" '" + strings.ReplaceAll(w, "'", `'\''`) + "'")
		}
		b.WriteString(" \"$@\"\n")
		if err := os.WriteFile(script, []byte(b.String()), 0o755); err != nil {
			return nil, nil, err
		}
		argv = append(argv, "-launcher-exec", script)
	default:
		argv = append(argv, "-launcher-exec", "ssh")
		env = append(env, "HYDRA_LAUNCHER_EXTRA_ARGS=-F "+c.SSHConfig())
	}
	argv = append(argv, "-hosts", strings.Join(job.Hosts, ","), "-n", strconv.Itoa(len(job.Hosts)))
	if job.Iface != "" {
		// Debian builds MPICH on UCX (ch4:ucx): its TCP transport on the
		// interface, and no shared memory, which would join ranks that
		// only share this machine's kernel
		argv = append(argv, "-iface", job.Iface, "-genv", "UCX_NET_DEVICES", job.Iface, "-genv", "UCX_TLS", "self,tcp")
	}
	argv = append(argv, bin)
	if job.MaxBytes > 0 {
		argv = append(argv, "--max-bytes", strconv.Itoa(job.MaxBytes))
	}
	if job.Vector > 0 {
		argv = append(argv, "--vector", strconv.Itoa(job.Vector))
	}
	return argv, env, nil
}

// BuildMPICH builds the allreduce program in C (mpi/allreduce.c) for
// MPICH in dir with mpicc.mpich and returns its path; its arguments are
// --max-bytes and --vector (MPIJob's), its output what ParseMPIResult
// reads.
func BuildMPICH(ctx context.Context, dir string) (string, error) {
	src, bin := filepath.Join(dir, "allreduce.c"), filepath.Join(dir, "allreduce-mpich")
	if err := os.WriteFile(src, allreduceC, 0o644); err != nil {
		return "", err
	}
	if _, err := exec.LookPath("mpicc.mpich"); err != nil {
		return "", &MissingError{What: "mpicc.mpich", Package: "libmpich-dev"}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(cctx, "mpicc.mpich", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: build %s: %v\n%s", src, err, out)
	}
	return bin, os.Chmod(bin, 0o755)
}
