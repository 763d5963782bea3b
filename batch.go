package gridlink

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/gridlink/gridlink/agent/control"
)

// Batch jobs (gridlink submit, gridlink jobs): a site's own batch system
// (Slurm) reached through gridlink exec on its frontend, as the account
// the frontend's grid-mapfile maps the caller to. gridlink schedules
// nothing itself: sbatch queues the job, squeue says how it stands.
// Files go in and out with gridlink cp (a transfer service on the
// frontend, whose home the nodes share), or with exec.

// SubmitRequest is a batch job for the Slurm cluster behind a frontend.
type SubmitRequest struct {
	// Frontend is the host that runs Slurm's commands, as gridlink exec
	// takes it (NODE, NODE.grid, USER@NODE.grid, ...).
	Frontend string
	// Account is the local account there (-l); empty: the grid-mapfile's
	// first for the caller, or USER@ of Frontend.
	Account string
	// Options are sbatch's (e.g. -N 2, --time=10, --output=...), passed as
	// words, each quoted for the remote shell.
	Options []string
	// Script is the job script, given to sbatch on its standard input.
	Script []byte
	// Dir is the submission directory at the frontend (the job's working
	// directory and where slurm-JOBID.out goes by default); empty: the
	// account's home.
	Dir string
}

// SubmitResult is a queued job.
type SubmitResult struct {
	JobID   string // Slurm's job ID
	Cluster string // the cluster's name, when sbatch gives one
}

// BatchError is a Slurm command at a frontend that failed: the command,
// its exit status and what it wrote to standard error.
type BatchError struct {
	Frontend string
	Command  string
	Status   ExecStatus
	Stderr   string
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("%s at %s: %s: %s", e.Command, e.Frontend, e.Status, strings.TrimSpace(e.Stderr))
}

// jobIDRE is sbatch --parsable's answer: JOBID or JOBID;CLUSTER.
var jobIDRE = regexp.MustCompile(`^([0-9]+(?:_[0-9]+)?)(?:;([A-Za-z0-9_.-]+))?$`)

// Submit queues req's script with sbatch at the frontend, through the
// caller's agent c and the frontend's exec service, and returns the job's
// ID. A refusal by exec is an *ExecRefusedError; sbatch's failure a
// *BatchError with its words.
func Submit(ctx context.Context, c *control.Client, req SubmitRequest) (SubmitResult, error) {
	line := "sbatch --parsable"
	for _, o := range req.Options {
		line += " " + shellQuote(o)
	}
	out, err := runBatch(ctx, c, req.Frontend, req.Account, req.Dir, line, req.Script)
	if err != nil {
		return SubmitResult{}, err
	}
	text := strings.TrimSpace(out)
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[i+1:] // sbatch may warn before its answer
	}
	m := jobIDRE.FindStringSubmatch(text)
	if m == nil {
		return SubmitResult{}, &BatchError{Frontend: req.Frontend, Command: "sbatch", Stderr: fmt.Sprintf("an answer that is not a job ID: %q", out)}
	}
	return SubmitResult{JobID: m[1], Cluster: m[2]}, nil
}

// Job is a batch job as squeue shows it.
type Job struct {
	ID     string `json:"id"`
	State  string `json:"state"` // PENDING, RUNNING, COMPLETED, FAILED, ...
	Name   string `json:"name"`
	User   string `json:"user"`
	Time   string `json:"time"`   // how long it has run
	Nodes  string `json:"nodes"`  // where it runs or ran
	Reason string `json:"reason"` // why it waits ("None" when it does not)
}

// JobsRequest asks a frontend how the caller's jobs stand.
type JobsRequest struct {
	Frontend, Account string
	// IDs limits the answer to these jobs; empty: all of the account's
	// jobs the controller still knows (finished ones for a few minutes,
	// MinJobAge).
	IDs []string
}

// squeueFormat is what Jobs asks squeue for: the name last, since it may
// hold the separator.
const squeueFormat = "%i|%T|%u|%M|%N|%r|%j"

var jobArgRE = regexp.MustCompile(`^[0-9]+(?:_[0-9]+)?$`)

// Jobs lists the account's jobs at the frontend with squeue (every
// state, so a finished job shows as COMPLETED or FAILED while the
// controller remembers it).
func Jobs(ctx context.Context, c *control.Client, req JobsRequest) ([]Job, error) {
	line := "squeue --me --noheader --states=all --format=" + shellQuote(squeueFormat)
	if len(req.IDs) > 0 {
		for _, id := range req.IDs {
			if !jobArgRE.MatchString(id) {
				return nil, fmt.Errorf("job ID %q: want digits (or ARRAYID_TASK)", id)
			}
		}
		line += " --jobs=" + strings.Join(req.IDs, ",")
	}
	out, err := runBatch(ctx, c, req.Frontend, req.Account, "", line, nil)
	if err != nil {
		return nil, err
	}
	return parseJobs(out), nil
}

// parseJobs reads squeue's lines in squeueFormat; others are skipped.
func parseJobs(out string) []Job {
	var jobs []Job
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "|", 7)
		if len(f) != 7 || !jobArgRE.MatchString(f[0]) {
			continue
		}
		jobs = append(jobs, Job{ID: f[0], State: f[1], User: f[2], Time: f[3], Nodes: f[4], Reason: f[5], Name: f[6]})
	}
	return jobs
}

// runBatch runs the shell line at the frontend through exec, with stdin,
// and returns its standard output; a non-zero exit is a *BatchError.
func runBatch(ctx context.Context, c *control.Client, frontend, account, dir, line string, stdin []byte) (string, error) {
	t, err := ParseExecTarget(frontend)
	if err != nil {
		return "", err
	}
	if t, err = t.Resolve(ctx, nil); err != nil {
		return "", err
	}
	if account != "" {
		t.Account = account
	}
	var out, errb bytes.Buffer
	st, err := Exec(ctx, c, t.Node, control.LinkOptions{}, ExecRequest{Account: t.Account, Command: []string{line}, Dir: dir},
		ExecIO{Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errb})
	if err != nil {
		return "", err
	}
	if st.ExitCode() != 0 {
		cmd, _, _ := strings.Cut(line, " ")
		return "", &BatchError{Frontend: frontend, Command: cmd, Status: st, Stderr: errb.String()}
	}
	return out.String(), nil
}

// shellQuote quotes s for a POSIX shell: as it is when it is plain,
// else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-=.,/:@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
