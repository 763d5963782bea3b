package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// gridlink exec takes what launchers written for ssh pass.
func TestParseExecArgs(t *testing.T) {
	t.Setenv("OMPI_MCA_x", "7")
	for _, tc := range []struct {
		args []string
		node string
		cmd  []string
		env  []string
		pty  int
		acct string
	}{
		// Open MPI's plm_rsh and MPICH hydra's ssh launcher: -x, then the host, then the command
		{args: []string{"-x", "g5k-n1", "PATH=/opt/bin:$PATH", ";", "export", "PATH", ";", "orted", "-mca", "ess", "env"}, node: "g5k-n1", cmd: []string{"PATH=/opt/bin:$PATH", ";", "export", "PATH", ";", "orted", "-mca", "ess", "env"}},
		{args: []string{"-x", "-q", "-o", "StrictHostKeyChecking=no", "-oBatchMode=yes", "-p", "22", "-T", "hiroshi-n1", "/usr/bin/hydra_pmi_proxy", "--control-port", "das3v-n1:4242"}, node: "hiroshi-n1", cmd: []string{"/usr/bin/hydra_pmi_proxy", "--control-port", "das3v-n1:4242"}, pty: -1},
		// Open MPI 4.1.4's words (a logging agent saw them so)
		{args: []string{"fakehost1", " orted", "--daemonize", "-mca", "ess", `"env"`, "-mca", "orte_hnp_uri", `"881000448.0;tcp://192.0.2.2:35267"`}, node: "fakehost1", cmd: []string{" orted", "--daemonize", "-mca", "ess", `"env"`, "-mca", "orte_hnp_uri", `"881000448.0;tcp://192.0.2.2:35267"`}},
		{args: []string{"n1", "--", "tar", "x", "-C", "/tmp/x"}, node: "n1", cmd: []string{"tar", "x", "-C", "/tmp/x"}},
		{args: []string{"--", "n1", "ls", "-l"}, node: "n1", cmd: []string{"ls", "-l"}},
		{args: []string{"n1", "-l", "physics", "-tx", "top"}, node: "n1", cmd: []string{"top"}, pty: 1, acct: "physics"},
		{args: []string{"-e", "OMPI_MCA_x", "-e", "A=1 2", "--env", "B=2", "--env=UNSET_HERE", "-tt", "n1@das3v"}, node: "n1@das3v", env: []string{"OMPI_MCA_x=7", "A=1 2", "B=2"}, pty: 1},
		// hostfile names on the virtual network, ssh's USER@HOST and URI forms
		{args: []string{"g5k-n1.grid", "orted"}, node: "g5k-n1", cmd: []string{"orted"}},
		{args: []string{"alice@g5k-n1.grid", "-p", "2222", "(", "test", "!", "-r", "./.profile", "||", ".", "./.profile;", "orted", ")"}, node: "g5k-n1", acct: "alice", cmd: []string{"(", "test", "!", "-r", "./.profile", "||", ".", "./.profile;", "orted", ")"}},
		{args: []string{"-l", "bob", "alice@n1@das3v", "id"}, node: "n1@das3v", acct: "bob", cmd: []string{"id"}},
		{args: []string{"ssh://carol@hiroshi-n1:22", "id"}, node: "hiroshi-n1", acct: "carol", cmd: []string{"id"}},
		// ssh's -o options that mean something here, and ones that do not
		{args: []string{"-o", "User=bob", "-oRequestTTY=force", "-o", "SendEnv OMPI_MCA_*", "-o", "SetEnv=X=1 Y=2", "-o", "ServerAliveInterval=5", "n1", "top"}, node: "n1", acct: "bob", pty: 1, env: []string{"OMPI_MCA_x=7", "X=1", "Y=2"}, cmd: []string{"top"}},
		{args: []string{"-vqy46", "-J", "jump", "-c", "aes128-ctr", "-i", "key", "-F", "/dev/null", "-E", "log", "n1", "-oRequestTTY=no", "true"}, node: "n1", pty: -1, cmd: []string{"true"}},
	} {
		o, err := parseExecArgs(tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if o.node != tc.node || !slices.Equal(o.req.Command, tc.cmd) && len(tc.cmd)+len(o.req.Command) > 0 || !slices.Equal(o.req.Env, tc.env) || o.pty != tc.pty || o.req.Account != tc.acct {
			t.Errorf("%q: node %q command %q env %q pty %d account %q", tc.args, o.node, o.req.Command, o.req.Env, o.pty, o.req.Account)
		}
	}
	for _, bad := range [][]string{{}, {"-x"}, {"-Z", "n1"}, {"-o"}, {"--nosuch", "n1"}, {"-e", "1BAD=x", "n1"}, {"--dir", "relative", "n1"}, {"-l", "../root", "n1", "id"}, {"-X", "n1", "xterm"},
		{"-L", "80:x:80", "n1"}, {"-N", "n1"}, {"-f", "n1", "sleep"}, {"-D1080", "n1"}, {"-o", "RequestTTY=maybe", "n1"}, {"-o", "SetEnv=X", "n1"},
		{"a@b@c@d", "id"}, {"../x@n1.grid", "id"}, {"n1:22", "id"}, {"ssh://n1:0", "id"},
		{"--resume-timeout", "-1s", "n1"}, {"--resume-timeout=soon", "n1"}, {"--resume-timeout"}} {
		if o, err := parseExecArgs(bad); err == nil {
			t.Errorf("%q accepted: %+v", bad, o)
		}
	}
	for args, want := range map[string]time.Duration{"--resume-timeout 0 n1 id": 0, "n1 --resume-timeout=90s id": 90 * time.Second} {
		if o, err := parseExecArgs(strings.Fields(args)); err != nil || o.resume == nil || *o.resume != want || o.node != "n1" || !slices.Equal(o.req.Command, []string{"id"}) {
			t.Errorf("%q: %+v %v", args, o, err)
		}
	}
}

// gridlink exec end to end, through the caller's agent, the target's
// exec service started from gridlink node's flags: the command's output,
// its exit status as exec's, a tar stream byte-exact, the environment the
// node accepts, a refusal with exit 255 and its reason.
func TestExecCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	g.WriteGrid(t, dir)
	creds := func(f pkitest.Files) gridlink.Credentials {
		return gridlink.Credentials{CA: filepath.Join(dir, "ca.pem"), CRL: filepath.Join(dir, "crl.pem"), Cert: f.Cert, Proxy: f.Proxy}
	}
	member := func(role ca.Role, name string) (gridlink.Key, gridlink.Credentials) {
		key, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		cert := g.Cert(t, role, name, key, time.Now().Add(-time.Hour), 24*time.Hour)
		return key, creds(pkitest.WriteCreds(t, dir, name, key, []*x509.Certificate{cert}))
	}
	hkey, hcreds := member(ca.Hub, "site")
	h, err := gridlink.NewHub(gridlink.HubConfig{Name: "site", Key: hkey, Credentials: hcreds, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go h.Serve(ctx)
	mapfile := filepath.Join(dir, "grid-mapfile")
	if err := os.WriteFile(mapfile, []byte(`"/O=testgrid/OU=user/CN=alice" root`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := func(name string) string { return fmt.Sprintf("@gridlink-cli-exec-%d-%s", os.Getpid(), name) }
	targetLog := &lockedLog{}
	tkey, tcreds := member(ca.Node, "target")
	tlog := slog.New(slog.NewTextHandler(targetLog, nil))
	target, err := gridlink.StartAgent(ctx, gridlink.AgentConfig{Control: sock("target"), Node: gridlink.Config{Name: "target", Key: tkey, Credentials: tcreds, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", Logger: tlog}})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	// as gridlink node --allow-exec --exec-accept-env ... starts it
	var xf execFlags
	flags := &cobra.Command{}
	xf.add(flags)
	if err := flags.ParseFlags([]string{"--allow-exec", "--grid-mapfile", mapfile, "--exec-accept-env", "LANG, OMPI_*", "--exec-accept-env=FOO"}); err != nil {
		t.Fatal(err)
	}
	stopExec, err := xf.start(target, tlog)
	if err != nil {
		t.Fatal(err)
	}
	defer stopExec()
	user := func(name string) string {
		p, err := proxy.New(g.User(t, name), proxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := gridlink.StartAgent(ctx, gridlink.AgentConfig{Control: sock(name), Node: gridlink.Config{Name: name + "-node", Credentials: creds(pkitest.WriteProxy(t, dir, name, p)), Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a.Control()
	}
	alice := user("alice")
	run := func(stdin *os.File, args ...string) (int, string, string) {
		t.Helper()
		if stdin == nil {
			var err error
			if stdin, err = os.Open(os.DevNull); err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
		}
		var out, errb bytes.Buffer
		code := runExec(args, stdin, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run(nil, "--control", alice, "target", "hostname"); code != 0 || out != osHostname(t)+"\n" {
		t.Errorf("exec target hostname: %d %q %q", code, out, errs)
	}
	if code, _, errs := run(nil, "--control", alice, "target", "exit", "3"); code != 3 {
		t.Errorf("exec target exit 3: %d %q", code, errs)
	}
	// tar c DIR | gridlink exec target -- tar x -C DEST: byte-exact
	src, dest := filepath.Join(dir, "src"), filepath.Join(dir, "dest")
	for _, d := range []string{filepath.Join(src, "sub"), dest} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 9<<20+7)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(src, "sub", "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "small"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tarFile := filepath.Join(dir, "src.tar")
	if out, err := exec.Command("tar", "cf", tarFile, "-C", dir, "src").CombinedOutput(); err != nil {
		t.Fatalf("tar c: %v %s", err, out)
	}
	in, err := os.Open(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if code, _, errs := run(in, "--control", alice, "target", "--", "tar", "x", "-C", dest); code != 0 {
		t.Fatalf("tar x through exec: %d %q", code, errs)
	}
	if out, err := exec.Command("diff", "-r", src, filepath.Join(dest, "src")).CombinedOutput(); err != nil {
		t.Errorf("the tree differs after tar through exec: %v %s", err, out)
	}
	// on links that are not resumable (as nc's to the sink), the same
	dest0 := t.TempDir()
	if _, err := in.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(in, "--control", alice, "--resume-timeout", "0", "target", "--", "tar", "x", "-C", dest0); code != 0 {
		t.Fatalf("tar x through exec --resume-timeout 0: %d %q", code, errs)
	}
	if out, err := exec.Command("diff", "-r", src, filepath.Join(dest0, "src")).CombinedOutput(); err != nil {
		t.Errorf("the tree differs after tar through exec --resume-timeout 0: %v %s", err, out)
	}
	// the node's accept list: LANG, OMPI_* and FOO pass, BAR is dropped
	// with a notice (stderr, the log); LD_PRELOAD, in ssh's -o SetEnv
	// form, is refused on both ends, and the command does not run
	code, out, errs := run(nil, "--control", alice, "-e", "LANG=C", "-o", "SetEnv=OMPI_MCA_btl=tcp FOO=1 BAR=2", "target", "env")
	notice := "exec at target: not passed to the command: BAR (the node passes only LANG OMPI_* FOO; its operator sets that with --exec-accept-env)"
	if code != 0 || !strings.Contains(out, "LANG=C\n") || !strings.Contains(out, "OMPI_MCA_btl=tcp\n") || !strings.Contains(out, "FOO=1\n") || strings.Contains(out, "BAR=") || errs != notice+"\n" {
		t.Errorf("exec -e LANG=C -o SetEnv=... target env: %d %q %q; want LANG, OMPI_MCA_btl and FOO, and the notice %q", code, out, errs, notice)
	}
	if !strings.Contains(targetLog.String(), "not passed to the command: BAR") {
		t.Errorf("the target's log does not say %q:\n%s", notice, targetLog)
	}
	mark := filepath.Join(dir, "preloaded")
	code, _, errs = run(nil, "--control", alice, "-o", "SetEnv=LD_PRELOAD="+filepath.Join(dir, "evil.so"), "target", "touch", mark)
	why := "target does not pass LD_PRELOAD to a command, whatever its accept list: the dynamic loader's"
	if code != 255 || !strings.Contains(errs, why) {
		t.Errorf("exec -o SetEnv=LD_PRELOAD=...: %d %q; want 255 and %q", code, errs, why)
	}
	if !strings.Contains(targetLog.String(), "exec: refused") || !strings.Contains(targetLog.String(), why) {
		t.Errorf("the target's log does not say %q:\n%s", why, targetLog)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the command ran with LD_PRELOAD")
	}
	// an unmapped user: 255 and the reason, which the target logs too
	why = `subject "/O=testgrid/OU=user/CN=mallory" is not in the grid-mapfile of target`
	code, _, errs = run(nil, "--control", user("mallory"), "target", "id")
	if code != 255 || !strings.Contains(errs, why) {
		t.Errorf("an unmapped user: %d %q; want 255 and %q", code, errs, why)
	}
	if l := targetLog.String(); !strings.Contains(l, "exec: refused") || !strings.Contains(l, `/O=testgrid/OU=user/CN=mallory\" is not in the grid-mapfile of target`) {
		t.Errorf("the target's log does not say %q:\n%s", why, targetLog)
	}
}

func osHostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
