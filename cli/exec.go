package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
)

const execUsage = `usage: gridlink exec [-tTn] [-l ACCOUNT] [-e NAME[=VALUE]]... [--dir DIR] [--control SOCKET] [--resume-timeout D] HOST [--] [COMMAND [ARG...]]

exec runs COMMAND on a node as ssh runs it on a host: the node's agent (run
with --allow-exec) maps your certificate or proxy subject to a local
account through its grid-mapfile and runs the words joined with spaces
with that account's shell (-c); no COMMAND: a login shell. Your own agent
(gridlink node --proxy ...) makes the connection, as for gridlink nc.
stdin, stdout and stderr are streamed (stdin's end reaches the command),
INT, TERM and HUP are forwarded, and exec exits with the command's status
(128+N when signal N killed it); 255 when exec itself fails or is refused.

HOST is the node: NODE (its name or ID), NODE.grid (its name on the
virtual network), NODE@HUB; USER@NODE.grid, USER@NODE@HUB or
ssh://[USER@]HOST[:PORT] ask for account USER; a virtual IP address is the
node its name server names for it.

  -t            a pseudo-terminal (default: only for a login shell on a terminal)
  -T            no pseudo-terminal
  -n            stdin from /dev/null
  -l ACCOUNT    run as ACCOUNT, one the grid-mapfile maps you to (default: its first)
  -e NAME       pass NAME from this environment (-e NAME=VALUE: set it); the
                node passes only the variables it accepts (by default the
                locale, TERM and MPI's: OMPI_*, PMIX_*, HYDRA_*, ...), says
                which it dropped on stderr, and refuses LD_*, BASH_ENV, PATH
                and others that act before the account's shell
  --env NAME=VALUE, --env NAME   the same
  --dir DIR     working directory (default: the account's home)
  --control S   agent control socket (default: your agent's, then the system agent's)
  --resume-timeout D   how long the command's links wait for a path back when
                every connection beneath them died, resending what they carried
                (default 30s); 0: not resumable (a lost path ends the command,
                and bulk stdin costs less: no resend buffer)

As ssh: -o User=ACCOUNT, -o RequestTTY=yes|force|no|auto, -o SendEnv=PATTERN
(names with * and ?), -o SetEnv=NAME=VALUE; other -o options are ignored.
Accepted and ignored, as launchers written for ssh pass them: -1 -2 -4 -6
-a -A -C -g -k -K -q -v -x -y, and -b -B -c -E -F -i -I -J -m -p -P -S with
their argument. Refused, naming why: -X -Y (X11), -D -L -R -w -W (forwarding),
-f -N -s -M -G -V -O -Q. Short options combine (-tx); options may also
follow HOST, until the first word that is not one (or --). Called as
gridlink-exec (a link to gridlink), it is gridlink exec: launchers that
take one program as their ssh (MPICH's -launcher-exec) run it so.`

// ExecName is the name under which the gridlink binary is gridlink exec
// (a link to it), for launchers that take a single program where they
// would run ssh.
const ExecName = "gridlink-exec"

// execOpts are gridlink exec's parsed arguments.
type execOpts struct {
	node    string
	req     gridlink.ExecRequest
	pty     int // 1 -t, -1 -T, 0 unset
	null    bool
	control string
	// resume is --resume-timeout's; nil: the agent's default
	resume *time.Duration
	// account is -l's or -o User's; it wins over USER@HOST, as in ssh
	account string
	target  gridlink.ExecTarget
}

// ssh's options, by what gridlink exec does with them.
const (
	sshIgnored    = "1246aACgkKqvxy" // no argument, nothing to do in a grid
	sshIgnoredArg = "bBcEFiIJmpPS"   // an argument, nothing to do in a grid
	sshRefused    = "XYfNsMGV"       // no argument, not supported
	sshRefusedArg = "DLRwWOQ"        // an argument, not supported
)

// sshRefusal says why an ssh option is refused.
func sshRefusal(c byte) string {
	switch c {
	case 'X', 'Y':
		return "X11 forwarding is not supported"
	case 'D', 'L', 'R', 'w', 'W':
		return "forwarding is not exec's (gridlink forward, expose, socks and vip are)"
	case 'f', 'N':
		return "exec runs a command in the foreground"
	case 's':
		return "subsystems are not supported"
	}
	return "an ssh client's own option, not supported"
}

// parseExecArgs parses ssh-style arguments: options, HOST, options, then
// the command.
func parseExecArgs(args []string) (*execOpts, error) {
	o := &execOpts{}
	host := ""
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
			if host == "" {
				if i >= len(args) {
					return nil, errors.New("no HOST")
				}
				host = args[i]
				i++
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if host != "" {
				break // the command
			}
			host = a
			continue
		}
		if long, ok := strings.CutPrefix(a, "--"); ok {
			name, val, hasVal := strings.Cut(long, "=")
			switch name {
			case "env", "dir", "control", "resume-timeout":
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
				case "resume-timeout":
					d, err := time.ParseDuration(val)
					if err != nil || d < 0 {
						return nil, fmt.Errorf("--resume-timeout %q: want a duration, 0 or more (30s, 0)", val)
					}
					o.resume = &d
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
			switch {
			case c == 't':
				o.pty = 1
			case c == 'T':
				o.pty = -1
			case c == 'n':
				o.null = true
			case c == 'h':
				return nil, errHelp
			case strings.IndexByte(sshIgnored, c) >= 0:
			case strings.IndexByte(sshRefused, c) >= 0:
				return nil, fmt.Errorf("-%c: %s", c, sshRefusal(c))
			case c == 'l' || c == 'e' || c == 'o' || strings.IndexByte(sshIgnoredArg+sshRefusedArg, c) >= 0:
				val := a[j+1:]
				if val == "" {
					v, err := next("-" + string(c))
					if err != nil {
						return nil, err
					}
					val = v
				}
				switch {
				case c == 'l':
					o.account = val
				case c == 'e':
					o.addEnv(val)
				case c == 'o':
					if err := o.sshOption(val); err != nil {
						return nil, err
					}
				case strings.IndexByte(sshRefusedArg, c) >= 0:
					return nil, fmt.Errorf("-%c: %s", c, sshRefusal(c))
				}
				j = len(a)
			default:
				return nil, fmt.Errorf("unknown option -%c", c)
			}
		}
	}
	if host == "" {
		return nil, errors.New("no HOST")
	}
	t, err := gridlink.ParseExecTarget(host)
	if err != nil {
		return nil, err
	}
	o.target = t
	o.node, o.req.Account = t.Node, t.Account
	if o.account != "" {
		o.req.Account = o.account
	}
	o.req.Command = append([]string(nil), args[min(i, len(args)):]...)
	return o, o.req.Check()
}

// sshOption takes an ssh -o option (KEY=VALUE or KEY VALUE; keys in any
// case): the few that mean something for exec, the others ignored.
func (o *execOpts) sshOption(s string) error {
	key, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		key, val, _ = strings.Cut(strings.TrimSpace(s), " ")
	}
	key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
	switch key {
	case "user":
		o.account = val
	case "requesttty":
		switch strings.ToLower(val) {
		case "yes", "force":
			o.pty = 1
		case "no":
			o.pty = -1
		case "auto":
			o.pty = 0
		default:
			return fmt.Errorf("-o RequestTTY=%s: want yes, force, no or auto", val)
		}
	case "sendenv":
		for _, pat := range strings.Fields(val) {
			o.sendEnv(pat)
		}
	case "setenv":
		for _, kv := range strings.Fields(val) {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("-o SetEnv=%s: want NAME=VALUE", kv)
			}
			o.req.Env = append(o.req.Env, kv)
		}
	}
	return nil
}

// sendEnv passes the variables of this environment whose names match
// pattern (ssh's SendEnv: * and ?).
func (o *execOpts) sendEnv(pattern string) {
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if ok, err := path.Match(pattern, name); err == nil && ok && validEnvName(name) {
			o.req.Env = append(o.req.Env, kv)
		}
	}
}

// validEnvName says whether name may be passed: letters, digits and '_',
// not starting with a digit (the environment may hold others, such as
// bash's exported functions).
func validEnvName(name string) bool {
	for i, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return name != ""
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
		Use:                "exec [-tTn] [-l ACCOUNT] [-e NAME] HOST [--] [COMMAND [ARG...]]",
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
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	t, err := o.target.Resolve(rctx, nil) // a virtual IP address: its node
	rcancel()
	if err != nil {
		fmt.Fprintf(stderr, "gridlink exec: %v\n", err)
		return 255
	}
	o.node = t.Node
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
	var lo control.LinkOptions
	if o.resume != nil {
		lo.ResumeSeconds = o.resume.Seconds()
		if *o.resume == 0 {
			lo.ResumeSeconds = -1
		}
	}
	st, err := gridlink.Exec(ctx, control.Dial(o.control), o.node, lo, o.req, gridlink.ExecIO{Stdin: in, Stdout: stdout, Stderr: stderr, Signals: fwd, Window: win})
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
	// acceptEnv is --exec-accept-env's, each value split at commas and
	// spaces; nil (not given): the service's default
	acceptEnv    []string
	allowNologin bool
}

func (xf *execFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&xf.allow, "allow-exec", false, "run commands for grid members (gridlink exec) as the accounts --grid-mapfile maps them to; needs --ca")
	c.Flags().StringVar(&xf.mapfile, "grid-mapfile", gridlink.DefaultGridMapfile, `the exec service's grid-mapfile: lines "SUBJECT" ACCOUNT[,ACCOUNT...]`)
	c.Flags().StringArrayVar(&xf.acceptEnv, "exec-accept-env", nil, "environment variables the exec service passes from callers, as sshd's AcceptEnv: names or patterns with * and ?, comma- or space-separated (repeatable; replaces the default "+strings.Join(gridlink.DefaultExecAcceptEnv(), " ")+`; "" for none); LD_*, BASH_ENV, PATH and others that act before the account's shell are refused whatever it says`)
	c.Flags().BoolVar(&xf.allowNologin, "exec-allow-nologin", false, "run exec's commands as accounts whose login shell refuses logins (nologin, false) with /bin/sh, instead of refusing them")
}

// acceptEnvPatterns are --exec-accept-env's patterns; nil when not given.
func (xf *execFlags) acceptEnvPatterns() []string {
	if xf.acceptEnv == nil {
		return nil
	}
	pats := []string{}
	for _, v := range xf.acceptEnv {
		pats = append(pats, strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })...)
	}
	return pats
}

// start starts the agent's exec service if --allow-exec asks for one,
// logging to logger (the node's, with -v) or standard error, and returns
// what stops it.
func (xf *execFlags) start(a *gridlink.Agent, logger *slog.Logger) (func(), error) {
	if !xf.allow {
		return func() {}, nil
	}
	s, err := a.ServeExec(gridlink.ExecConfig{Mapfile: xf.mapfile, Logger: logger, AcceptEnv: xf.acceptEnvPatterns(), AllowNologin: xf.allowNologin})
	if err != nil {
		return nil, err
	}
	return func() { s.Close() }, nil
}
