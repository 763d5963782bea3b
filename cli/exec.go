package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
)

const execUsage = `usage: gridlink exec [-tTn] [-l ACCOUNT] [-e NAME[=VALUE]]... [--dir DIR] [--control SOCKET] NODE [--] [COMMAND [ARG...]]

exec runs COMMAND on NODE as ssh runs it on a host: NODE's agent (run with
--allow-exec) maps your certificate or proxy subject to a local account
through its grid-mapfile and runs the words joined with spaces with that
account's shell (-c); no COMMAND: a login shell. Your own agent (gridlink
node --proxy ...) makes the connection, as for gridlink nc. stdin,
stdout and stderr are streamed (stdin's end reaches the command), INT,
TERM and HUP are forwarded, and exec exits with the command's status
(128+N when signal N killed it); 255 when exec itself fails or is refused.

  -t            a pseudo-terminal (default: only for a login shell on a terminal)
  -T            no pseudo-terminal
  -n            stdin from /dev/null
  -l ACCOUNT    run as ACCOUNT, one the grid-mapfile maps you to (default: its first)
  -e NAME       pass NAME from this environment (-e NAME=VALUE: set it)
  --env NAME=VALUE, --env NAME   the same
  --dir DIR     working directory (default: the account's home)
  --control S   agent control socket (default: your agent's, then the system agent's)

Accepted and ignored, as launchers written for ssh pass them: -x -a -k -q -4
-6 -C -A, and -o OPTION -p PORT -i FILE -F FILE (with their argument);
-X and -Y (X11 forwarding) are refused.
Options may also follow NODE, until the first word that is not one
(or --). NODE may be NODE@HUB.`

// execOpts are gridlink exec's parsed arguments.
type execOpts struct {
	node    string
	req     gridlink.ExecRequest
	pty     int // 1 -t, -1 -T, 0 unset
	null    bool
	control string
}

// parseExecArgs parses ssh-style arguments: options, NODE, options, then
// the command.
func parseExecArgs(args []string) (*execOpts, error) {
	o := &execOpts{}
	i := 0
	next := func(flag string) (string, error) {
		if i+1 >= len(args) {
			return "", fmt.Errorf("option %s needs an argument", flag)
		}
		i++
		return args[i], nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			if o.node == "" {
				if i >= len(args) {
					return nil, errors.New("no NODE")
				}
				o.node = args[i]
				i++
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if o.node != "" {
				break // the command
			}
			o.node = a
			continue
		}
		if long, ok := strings.CutPrefix(a, "--"); ok {
			name, val, hasVal := strings.Cut(long, "=")
			switch name {
			case "env", "dir", "control":
				if !hasVal {
					v, err := next("--" + name)
					if err != nil {
						return nil, err
					}
					val = v
				}
				switch name {
				case "env":
					o.addEnv(val)
				case "dir":
					o.req.Dir = val
				case "control":
					o.control = val
				}
			case "help":
				return nil, errHelp
			default:
				return nil, fmt.Errorf("unknown option --%s", name)
			}
			continue
		}
		// short options, possibly combined (-tx), an argument attached or next
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 't':
				o.pty = 1
			case 'T':
				o.pty = -1
			case 'n':
				o.null = true
			case 'x', 'a', 'k', 'q', '4', '6', 'C', 'A':
				// ssh's X11 and agent forwarding off/on, quiet, address family, compression
			case 'X', 'Y':
				return nil, fmt.Errorf("-%c: X11 forwarding is not supported", c)
			case 'h':
				return nil, errHelp
			case 'l', 'e', 'o', 'p', 'i', 'F':
				val := a[j+1:]
				if val == "" {
					v, err := next("-" + string(c))
					if err != nil {
						return nil, err
					}
					val = v
				}
				switch c {
				case 'l':
					o.req.Account = val
				case 'e':
					o.addEnv(val)
				}
				j = len(a)
			default:
				return nil, fmt.Errorf("unknown option -%c", c)
			}
		}
	}
	if o.node == "" {
		return nil, errors.New("no NODE")
	}
	o.req.Command = append([]string(nil), args[min(i, len(args)):]...)
	return o, o.req.Check()
}

var errHelp = errors.New("help")

// addEnv adds NAME=VALUE, or NAME as this process has it (nothing if it
// has none).
func (o *execOpts) addEnv(s string) {
	if strings.Contains(s, "=") {
		o.req.Env = append(o.req.Env, s)
		return
	}
	if v, ok := os.LookupEnv(s); ok {
		o.req.Env = append(o.req.Env, s+"="+v)
	}
}

func execCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "exec [-tTn] [-l ACCOUNT] [-e NAME] NODE [--] [COMMAND [ARG...]]",
		Short:              "run a command on another node as ssh does, as the account its grid-mapfile maps you to",
		Long:               execUsage,
		DisableFlagParsing: true,
		Run: func(cmd *cobra.Command, args []string) {
			os.Exit(runExec(args, os.Stdin, os.Stdout, os.Stderr))
		},
	}
}

// runExec runs gridlink exec and returns its exit code.
func runExec(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	o, err := parseExecArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprintln(stdout, execUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gridlink exec: %v\n%s\n", err, strings.SplitN(execUsage, "\n", 2)[0])
		return 255
	}
	onTerm := term.IsTerminal(int(stdin.Fd()))
	o.req.Pty = o.pty == 1 || (o.pty == 0 && len(o.req.Command) == 0 && onTerm)
	var in io.Reader = stdin
	if o.null {
		in = nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	forwarded := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	if winch != nil {
		forwarded = append(forwarded, winch)
	}
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	fwd := make(chan int, 4)
	win := make(chan [2]uint16, 1)
	if o.req.Pty {
		o.req.Term = os.Getenv("TERM")
		if !validTerm(o.req.Term) {
			o.req.Term = ""
		}
		if w, h, err := term.GetSize(int(stdin.Fd())); err == nil && w > 0 && h > 0 {
			o.req.Rows, o.req.Cols = uint16(h), uint16(w)
		}
		if onTerm && !o.null {
			if old, err := term.MakeRaw(int(stdin.Fd())); err == nil {
				defer term.Restore(int(stdin.Fd()), old)
			}
		}
	}
	go func() {
		for s := range sigs {
			switch s {
			case winch:
				if w, h, err := term.GetSize(int(stdin.Fd())); err == nil && o.req.Pty && w > 0 && h > 0 {
					select {
					case win <- [2]uint16{uint16(h), uint16(w)}:
					default:
					}
				}
			case syscall.SIGINT:
				fwd <- gridlink.ExecSIGINT
			case syscall.SIGTERM:
				fwd <- gridlink.ExecSIGTERM
			case syscall.SIGHUP:
				fwd <- gridlink.ExecSIGHUP
			}
		}
	}()
	st, err := gridlink.Exec(ctx, control.Dial(o.control), o.node, control.LinkOptions{}, o.req, gridlink.ExecIO{Stdin: in, Stdout: stdout, Stderr: stderr, Signals: fwd, Window: win})
	if err != nil {
		fmt.Fprintf(stderr, "gridlink exec: %v\n", err)
		return 255
	}
	return st.ExitCode()
}

// validTerm says whether a TERM value may be sent (letters, digits, _.+-).
func validTerm(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.+-", r)) {
			return false
		}
	}
	return true
}

// execFlags are gridlink node's flags of the exec service.
type execFlags struct {
	allow   bool
	mapfile string
}

func (xf *execFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&xf.allow, "allow-exec", false, "run commands for grid members (gridlink exec) as the accounts --grid-mapfile maps them to; needs --ca")
	c.Flags().StringVar(&xf.mapfile, "grid-mapfile", gridlink.DefaultGridMapfile, `the exec service's grid-mapfile: lines "SUBJECT" ACCOUNT[,ACCOUNT...]`)
}

// start starts the agent's exec service if --allow-exec asks for one,
// logging to logger (the node's, with -v) or standard error, and returns
// what stops it.
func (xf *execFlags) start(a *gridlink.Agent, logger *slog.Logger) (func(), error) {
	if !xf.allow {
		return func() {}, nil
	}
	s, err := a.ServeExec(gridlink.ExecConfig{Mapfile: xf.mapfile, Logger: logger})
	if err != nil {
		return nil, err
	}
	return func() { s.Close() }, nil
}
