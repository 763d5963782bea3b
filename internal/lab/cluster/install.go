package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
)

// Debian packages of what the cluster runs.
var (
	// SSHPackages: the sshds and their clients.
	SSHPackages = []string{"openssh-server", "openssh-client"}
	// MPIPackages: Open MPI's mpirun and orted, and mpi4py for the job.
	MPIPackages = []string{"openmpi-bin", "python3-mpi4py"}
	// MPICHPackages: MPICH's mpiexec.hydra and hydra_pmi_proxy, and
	// mpicc.mpich for the job in C.
	MPICHPackages = []string{"mpich", "libmpich-dev"}
	// SSHFSPackages: sshfs and FUSE's fusermount3.
	SSHFSPackages = []string{"sshfs", "fuse3"}
	// NFSPackages: the NFS server's user-space half (rpc.nfsd, exportfs)
	// and the client's mount helper; the kernel must have the rest
	// (ProbeNFS).
	NFSPackages = []string{"nfs-kernel-server", "nfs-common"}
)

// Install installs those of pkgs that are not installed yet, the way
// `make deps` does (apt-get, no recommends, quietly, no service started),
// and does nothing when all are there. It holds the lab lock while
// apt-get runs (10 minutes at most, from when it has the lock), so call
// it before labtest.Up (and before timing anything).
func Install(ctx context.Context, pkgs ...string) error {
	missing := Missing(pkgs...)
	if len(missing) == 0 {
		return nil
	}
	// no lab may be up meanwhile: a lab's guard in the root namespace
	// refuses the documentation prefixes, where the package mirror may
	// answer (labtest.Up takes the same lock)
	if err := os.MkdirAll(lab.StateDir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(lab.StateDir, "test.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if missing = Missing(pkgs...); len(missing) == 0 {
		return nil // installed meanwhile
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	// packages with daemons (munge, slurmctld, slurmd) must not start
	// them in the root namespace: invoke-rc.d asks policy-rc.d first
	if _, err := os.Lstat(policyRCD); os.IsNotExist(err) {
		if err := os.WriteFile(policyRCD, []byte("#!/bin/sh\n# package cluster: no services started while it installs\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policyRCD)
		}
	}
	for _, argv := range [][]string{
		{"apt-get", "update", "-qq"},
		append([]string{"apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300"}, missing...),
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return &InstallError{Packages: missing, Step: strings.Join(argv[:2], " "), Err: err, Output: lastLines(string(out), 8)}
		}
	}
	if still := Missing(pkgs...); len(still) > 0 {
		return &InstallError{Packages: still, Step: "apt-get install", Err: fmt.Errorf("still not installed")}
	}
	return nil
}

// installTimeout bounds apt-get's work, from when Install has the lab
// lock (waiting for it may take as long as others' lab tests).
const installTimeout = 10 * time.Minute

// policyRCD is Debian's hook that invoke-rc.d asks before it starts a
// package's service (exit 101: not now).
const policyRCD = "/usr/sbin/policy-rc.d"

// Missing lists those of pkgs that dpkg does not have installed.
func Missing(pkgs ...string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// InstallError is a failed installation of Debian packages.
type InstallError struct {
	Packages []string
	Step     string // the apt-get command that failed
	Err      error
	Output   string // its last lines
}

func (e *InstallError) Error() string {
	return fmt.Sprintf("cluster: install %s: %s: %v\n%s", strings.Join(e.Packages, " "), e.Step, e.Err, e.Output)
}

func (e *InstallError) Unwrap() error { return e.Err }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
