package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const nobody = 65534

// squatEnv makes this test binary a squatter (TestSquatHelper).
const squatEnv = "GRIDLINK_CONTROL_TEST_SQUAT"

// TestSquatHelper is the squatter's body, run as another uid: it listens
// on the socket $GRIDLINK_CONTROL_TEST_SQUAT until its standard input
// closes. It does nothing in a plain test run.
func TestSquatHelper(t *testing.T) {
	sock := os.Getenv(squatEnv)
	if sock == "" {
		return
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	fmt.Println("READY")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// squat runs TestSquatHelper as uid on sock, from a copy of this test
// binary where any uid may run it (go test's build directory is private
// to root).
func squat(t *testing.T, uid int, sock string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root (runs a process as another uid)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gridlink-control-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "control.test")
	b, err := os.ReadFile(self)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestSquatHelper$")
	cmd.Env = []string{squatEnv + "=" + sock, "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "READY" {
		t.Fatalf("squatter: %q", line)
	}
}

// A socket found by default that another uid holds (someone took the
// system agent's name first) is not used.
func TestClientRefusesForeignAgent(t *testing.T) {
	sock := fmt.Sprintf("@gridlink-test-%d-squat", os.Getpid())
	squat(t, nobody, sock)
	c := Dial(sock)
	c.byDefault = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Status(ctx)
	var fe *ForeignAgentError
	if !errors.As(err, &fe) || fe.UID != nobody {
		t.Errorf("status at a socket held by uid %d: %v", nobody, err)
	}
}
