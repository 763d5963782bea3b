package exec

import (
	"os"
	osexec "os/exec"
	"os/signal"
	"syscall"
	"testing"
)

// A node started with signals ignored (nohup, a background job of a
// script) still delivers the caller's signals: the commands it runs do not
// inherit the ignoring. Before defaultSignals, TestExecSignals failed so
// (its hang-up and interrupt never reached the command).
func TestExecSignalsWhenIgnored(t *testing.T) {
	if os.Getenv("GRIDLINK_EXEC_IGNORED") != "" {
		t.Skip("the inner run")
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)
	cmd := osexec.Command(os.Args[0], "-test.run=^TestExecSignals$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRIDLINK_EXEC_IGNORED=1")
	out, err := cmd.CombinedOutput()
	signal.Reset(syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)
	if err != nil {
		t.Fatalf("TestExecSignals under ignored SIGHUP, SIGINT and SIGQUIT: %v\n%s", err, out)
	}
}
