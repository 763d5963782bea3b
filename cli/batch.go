package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
)

// batchFlags are the flags submit and jobs share: how exec reaches the
// frontend.
type batchFlags struct {
	control, account string
}

func (bf *batchFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&bf.control, "control", "", "agent control socket (default: your agent's, then the system agent's)")
	c.Flags().StringVarP(&bf.account, "login", "l", "", "the account at the frontend, one its grid-mapfile maps you to (default: its first)")
}

func submitCmd() *cobra.Command {
	var bf batchFlags
	var dir string
	c := &cobra.Command{
		Use:   "submit [-l ACCOUNT] [--dir DIR] FRONTEND [SBATCH-OPTION...] SCRIPT",
		Short: "submit a batch job to the Slurm cluster behind a site's frontend, as the account its grid-mapfile maps you to",
		Long: `submit runs sbatch on FRONTEND through gridlink exec (its agent runs
with --allow-exec) with SCRIPT, a local file ("-": standard input), on
sbatch's standard input, and prints the job's ID. The words between
FRONTEND and SCRIPT are sbatch's options, passed as they are; the job runs
as the account FRONTEND's grid-mapfile maps your certificate or proxy to,
from its home (or --dir), where slurm-JOBID.out goes unless --output says
otherwise. Stage files in and out with gridlink cp (or gridlink exec);
gridlink jobs shows how the job stands.`,
		Example: `  gridlink submit g5k-fe -N 2 --time=10 job.sh
  gridlink submit -l physics g5k-fe.grid --output=run-%j.out run.sh
  gridlink exec g5k-fe cat slurm-42.out`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			script, err := readScript(args[len(args)-1], os.Stdin)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			r, err := gridlink.Submit(ctx, control.Dial(bf.control), gridlink.SubmitRequest{
				Frontend: args[0], Account: bf.account, Options: args[1 : len(args)-1], Script: script, Dir: dir})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.JobID)
			return nil
		},
	}
	bf.add(c)
	c.Flags().StringVar(&dir, "dir", "", "the submission directory at the frontend (default: the account's home)")
	// sbatch's options follow FRONTEND: everything after it is the job's
	c.Flags().SetInterspersed(false)
	return c
}

// readScript reads the job script: a file, or stdin for "-".
func readScript(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("the job script " + name + " is empty")
	}
	return b, nil
}

func jobsCmd() *cobra.Command {
	var bf batchFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "jobs [-l ACCOUNT] [--json] FRONTEND [JOBID...]",
		Short: "show your batch jobs at a site's Slurm cluster (squeue through gridlink exec)",
		Long: `jobs runs squeue on FRONTEND through gridlink exec, as the account its
grid-mapfile maps you to, and prints that account's jobs in every state
the controller still knows (a finished job stays COMPLETED or FAILED for
Slurm's MinJobAge, 5 minutes by default), or only the JOBIDs given.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			jobs, err := gridlink.Jobs(ctx, control.Dial(bf.control), gridlink.JobsRequest{Frontend: args[0], Account: bf.account, IDs: args[1:]})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if jobs == nil {
					jobs = []gridlink.Job{}
				}
				e := json.NewEncoder(out)
				e.SetIndent("", "  ")
				return e.Encode(jobs)
			}
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "JOBID\tSTATE\tNAME\tUSER\tTIME\tNODES\tREASON")
			for _, j := range jobs {
				fmt.Fprintln(tw, strings.Join([]string{j.ID, j.State, j.Name, j.User, j.Time, j.Nodes, j.Reason}, "\t"))
			}
			return tw.Flush()
		},
	}
	bf.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the jobs as JSON")
	return c
}
