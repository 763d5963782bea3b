package exec

import (
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A caller's variables that act before the account's shell (the dynamic
// loader's, the shell's start-up, PATH) are refused, named on both ends,
// also when the node's accept list matches everything; the command never
// runs (BASH_ENV's script would run as bash starts, before the command).
func TestExecEnvNeverPassed(t *testing.T) {
	for _, accept := range [][]string{nil, {"*"}} {
		gr := newGridWith(t, aliceMap, false, Config{AcceptEnv: accept})
		alice := gr.user(t, "alice")
		dir := t.TempDir()
		mark, early := filepath.Join(dir, "ran"), filepath.Join(dir, "bash-env-ran")
		script := filepath.Join(dir, "bash_env")
		if err := os.WriteFile(script, []byte("touch "+early+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ set, name, why string }{
			{"LD_PRELOAD=" + filepath.Join(dir, "evil.so"), "LD_PRELOAD", "the dynamic loader's"},
			{"BASH_ENV=" + script, "BASH_ENV", "the shell's"},
			{"PATH=" + dir + ":/usr/bin:/bin", "PATH", "set from the account as a login sets it"},
			{"PYTHONPATH=" + dir, "PYTHONPATH", "an interpreter's"},
			{"GCONV_PATH=" + dir, "GCONV_PATH", "the C library's"},
		} {
			_, errs, st, err := output(t, alice, Request{Command: []string{"touch " + mark}, Env: []string{"LANG=C.UTF-8", tc.set}}, nil)
			want := "target does not pass " + tc.name + " to a command, whatever its accept list: " + tc.why
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(re.Reason, want) {
				t.Errorf("accept %q, %s: %v %v %q; want refused saying %q", accept, tc.set, st, err, errs, want)
			} else if !gr.log.has("exec: refused ") || !gr.log.has(re.Reason) {
				t.Errorf("accept %q, %s: the target's log does not say %q:\n%s", accept, tc.set, re.Reason, gr.log)
			}
			for _, f := range []string{mark, early} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("accept %q, %s: %s was made: the command (or the shell's start-up) ran", accept, tc.set, f)
					os.Remove(f)
				}
			}
		}
	}
}

// The variables the accept list names reach the command (the locale,
// TERM, MPI's); others are dropped, the caller told on its stderr before
// the command's output and the log saying the same; the log names the
// variables set, never their values. An operator's list replaces the
// default.
func TestExecEnvAccepted(t *testing.T) {
	gr := newGrid(t, aliceMap, false)
	alice := gr.user(t, "alice")
	env := []string{"LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "OMPI_MCA_btl=self,tcp", "HYDRA_DEBUG=0", "SECRET_TOKEN=hunter2", "FOO=1"}
	out, errs, st, err := output(t, alice, Request{Command: []string{"env; echo >&2 the command"}, Env: env}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("%v %v %q", st, err, errs)
	}
	for _, e := range env[:5] {
		if !strings.Contains("\n"+out, "\n"+e+"\n") {
			t.Errorf("the command's environment lacks %s:\n%s", e, out)
		}
	}
	for _, n := range []string{"SECRET_TOKEN", "FOO"} {
		if strings.Contains(out, n+"=") {
			t.Errorf("%s reached the command:\n%s", n, out)
		}
	}
	notice := "exec at target: not passed to the command: SECRET_TOKEN, FOO (the node passes only LANG LANGUAGE LC_* TERM"
	if !strings.HasPrefix(errs, notice) || !strings.HasSuffix(errs, "--exec-accept-env)\nthe command\n") {
		t.Errorf("the caller's stderr %q; want the notice %q first, then the command's", errs, notice)
	}
	if !gr.log.has(strings.TrimSuffix(strings.SplitN(errs, "\n", 2)[0], "\n")) {
		t.Errorf("the target's log does not say %q:\n%s", errs, gr.log)
	}
	if !gr.log.has("with environment LANG LC_ALL TERM OMPI_MCA_btl HYDRA_DEBUG") || gr.log.has("hunter2") || gr.log.has("self,tcp") {
		t.Errorf("the target's log should name the variables set, and no value:\n%s", gr.log)
	}

	// an operator's list: FOO only
	gr = newGridWith(t, aliceMap, false, Config{AcceptEnv: []string{"FOO"}})
	out, errs, _, err = output(t, gr.user(t, "alice"), Request{Command: []string{"env"}, Env: []string{"FOO=1", "LANG=C"}}, nil)
	if err != nil || !strings.Contains(out, "FOO=1\n") || strings.Contains(out, "LANG=") || !strings.Contains(errs, "not passed to the command: LANG (the node passes only FOO;") {
		t.Errorf("accept FOO: %v %q %q", err, out, errs)
	}
}

// A node operator's accept list that names a variable never passed, or
// is no pattern, is an error at start.
func TestExecAcceptEnvChecked(t *testing.T) {
	for _, bad := range [][]string{{"LANG", "LD_PRELOAD"}, {"BASH_ENV"}, {"PATH"}, {"OMPI_MCA_mca_base_component_path"}, {"["}, {""}, {"A=B"}} {
		if _, err := newEnvPolicy(bad); err == nil {
			t.Errorf("accept list %q taken", bad)
		}
	}
	p, err := newEnvPolicy([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.sift("n", []string{"X=1", "LD_AUDIT=/x"}); err == nil {
		t.Error("LD_AUDIT passed under accept *")
	}
	for name, never := range map[string]bool{"LD_LIBRARY_PATH": true, "IFS": true, "ENV": true, "PERL5OPT": true, "GLIBC_TUNABLES": true,
		"PMIX_MCA_mca_base_component_path": true, "GIT_EXEC_PATH": true, "HOME": true,
		"LANG": false, "OMPI_MCA_btl": false, "PMI_RANK": false, "ENVIRONMENT": false, "MYPATH": false} {
		if got := neverWhy(name) != ""; got != never {
			t.Errorf("%s never passed: %v, want %v", name, got, never)
		}
	}
}

// The attack as reported: LD_PRELOAD of a library whose constructor runs
// as the account, into an account whose shell is nologin (nobody). Both
// the account and the variable are refused, on both ends; the library
// never loads.
func TestExecPreloadIntoNologin(t *testing.T) {
	needRoot(t)
	nobody, err := lookupAccount("nobody")
	if err != nil || !noLogin(nobody.shell) {
		t.Skipf("this host's nobody: %+v %v; want one whose shell refuses logins", nobody, err)
	}
	cc, err := osexec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the preloaded library")
	}
	mark := anyoneMark(t)
	lib := filepath.Join(filepath.Dir(mark), "evil.so")
	src := filepath.Join(t.TempDir(), "evil.c")
	code := `#include <fcntl.h>
__attribute__((constructor)) static void evil(void) { close(open("` + mark + `", O_CREAT|O_WRONLY, 0644)); }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Skipf("cc: %v %s", err, out)
	}
	if err := os.Chmod(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{{}, {AllowNologin: true, AcceptEnv: []string{"*"}}} {
		gr := newGridWith(t, `"/O=testgrid/OU=user/CN=bob" nobody`+"\n", false, cfg)
		out, errs, st, err := output(t, gr.user(t, "bob"), Request{Command: []string{"true"}, Env: []string{"LD_PRELOAD=" + lib}}, nil)
		var re *RefusedError
		if !errors.As(err, &re) || !gr.log.has("exec: refused ") || !gr.log.has(re.Reason) {
			t.Errorf("LD_PRELOAD into nobody (%+v): %v %v %q %q; want refused on both ends\n%s", cfg, st, err, out, errs, gr.log)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Errorf("LD_PRELOAD into nobody (%+v): the library ran as nobody", cfg)
			os.Remove(mark)
		}
	}
}
