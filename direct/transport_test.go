package direct

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTransportSpec(t *testing.T) {
	good := map[string]transportSpec{
		"ssh://root@192.0.2.129/127.0.0.1:7000":    {user: "root", host: "192.0.2.129", target: "127.0.0.1:7000"},
		"ssh://hiroshi/7000":                       {host: "hiroshi", target: "127.0.0.1:7000"},
		"ssh://u@fe.example.org:2222/10.5.0.11:80": {user: "u", host: "fe.example.org", port: "2222", target: "10.5.0.11:80"},
		"ssh://[2001:db8::1]:22/[::1]:7000":        {host: "2001:db8::1", port: "22", target: "[::1]:7000"},
		"ssh://[2001:db8::1]/node-3:7000":          {host: "2001:db8::1", target: "node-3:7000"},
	}
	for in, want := range good {
		got, err := parseTransportSpec(in)
		if err != nil || got != want {
			t.Errorf("parse %q = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		back, err := parseTransportSpec(got.String())
		if err != nil || back != got {
			t.Errorf("round trip %q -> %q -> %+v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{
		"ssh://host", "ssh:///7000", "ssh://host/0", "ssh://host/70000", "ssh://@host/1", "ssh://host:0/1",
		"ssh://host:x/1", "ssh://[nothost]/1", "ssh://[::1/1", "ssh://ho st/1", "ssh://host/a b:1", "http://host/1",
		"ssh://host/+5",
	} {
		if s, err := parseTransportSpec(bad); err == nil {
			t.Errorf("parse %q accepted: %+v", bad, s)
		} else if !strings.Contains(err.Error(), "want ssh://") {
			t.Errorf("parse %q: unhelpful %v", bad, err)
		}
	}
}

// Transport specs may come from other hubs.
func FuzzTransportSpec(f *testing.F) {
	for _, s := range []string{"ssh://root@192.0.2.129/127.0.0.1:7000", "ssh://h/1", "ssh://[::1]:22/[::1]:2", "ssh://a@b:3/c:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseTransportSpec(s)
		if err != nil {
			return
		}
		b, err := parseTransportSpec(a.String())
		if err != nil || b != a {
			t.Fatalf("round trip %q -> %q -> %+v, %v", s, a.String(), b, err)
		}
	})
}

func TestTransportTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.WriteString(c, "raw\n")
			c.Close()
		}
	}()
	d := &Dialer{}
	c, err := d.Transport(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "raw\n" {
		t.Errorf("read %q", b)
	}
	for spec, want := range map[string]string{
		"nohost":                            "want HOST:PORT or ssh://",
		"127.0.0.2:0":                       "not 1-65535",
		"ssh://h/1":                         "ssh is not configured",
		"ssh://h":                           "no /PORT",
		closedPort(t, "127.0.0.3").String(): "connection refused",
	} {
		if _, err := d.Transport(context.Background(), spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Transport(%q): %v; want %q", spec, err, want)
		}
	}
}

func TestSSHConfigFile(t *testing.T) {
	dir := t.TempDir()
	inc := filepath.Join(dir, "more.conf")
	if err := os.WriteFile(inc, []byte("Host included\n  HostName 10.9.9.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := `# global options first
IdentityFile ~/.ssh/global_key
# unconditional here; inside a Host or Match block it would be
# conditional on it, as in OpenSSH
Include ` + inc + `

Host hiroshi hiroshi-fe
    HostName 192.0.2.129
    User=root
    Port 2222
    IdentityFile "/keys/hiroshi key"
    IdentityFile %d/id_%h_%r

Host *.das3 !bad.das3
    User das
    HostName %h.example.org

Host hiroshi
    User nobody
    Port 22

Match host hiroshi
    User matched

Match host *.das3
    Port 2200

Host *
    User fallback
    Port 22
`
	f, err := parseSSHConfig([]byte(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	for alias, want := range map[string]sshHost{
		"hiroshi":  {hostName: "192.0.2.129", user: "root", port: "2222", identityFiles: []string{"~/.ssh/global_key", "/keys/hiroshi key", "%d/id_%h_%r"}},
		"HIROSHI":  {hostName: "192.0.2.129", user: "root", port: "2222", identityFiles: []string{"~/.ssh/global_key", "/keys/hiroshi key", "%d/id_%h_%r"}},
		"fe.das3":  {hostName: "%h.example.org", user: "das", port: "2200", identityFiles: []string{"~/.ssh/global_key"}},
		"bad.das3": {user: "fallback", port: "2200", identityFiles: []string{"~/.ssh/global_key"}},
		"included": {hostName: "10.9.9.9", user: "fallback", port: "22", identityFiles: []string{"~/.ssh/global_key"}},
	} {
		got, err := f.lookup(alias)
		if err != nil || got.hostName != want.hostName || got.user != want.user || got.port != want.port || strings.Join(got.identityFiles, "|") != strings.Join(want.identityFiles, "|") {
			t.Errorf("lookup(%q) = %+v, want %+v", alias, got, want)
		}
	}
	// Match blocks of criteria the library cannot judge never apply, and
	// leave the rest of the file in force.
	f, err = parseSSHConfig([]byte("Match exec \"true\"\n  User m\nMatch host a,b user x\n  User n\nHost a\n  User first\n"), "x")
	if err != nil {
		t.Fatalf("a file with Match exec and Match host+user: %v", err)
	}
	if h, err := f.lookup("a"); err != nil || h.user != "first" {
		t.Errorf("lookup(a) in a file with Match exec: %+v, %v; want User first", h, err)
	}
	// Resolving a spec: the spec beats the file, which beats SSHConfig.
	cfgPath := filepath.Join(dir, "config")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &SSHConfig{ConfigFile: cfgPath, User: "cfguser", IdentityFiles: []string{"/k1"}}
	s, _ := parseTransportSpec("ssh://hiroshi/7000")
	tgt, err := c.resolve(s)
	if err != nil || tgt.addr != "192.0.2.129:2222" || tgt.user != "root" || len(tgt.identity) != 4 || tgt.identity[3] != "/k1" || strings.Contains(tgt.identity[2], "%") {
		t.Errorf("resolve hiroshi: %+v, %v", tgt, err)
	}
	s, _ = parseTransportSpec("ssh://me@hiroshi:22/7000")
	if tgt, err = c.resolve(s); err != nil || tgt.addr != "192.0.2.129:22" || tgt.user != "me" {
		t.Errorf("resolve with spec user and port: %+v, %v", tgt, err)
	}
	c.ConfigFile = filepath.Join(dir, "missing")
	s, _ = parseTransportSpec("ssh://10.0.0.1/7000")
	if tgt, err = c.resolve(s); err != nil || tgt.addr != "10.0.0.1:22" || tgt.user != "cfguser" {
		t.Errorf("resolve without a config file: %+v, %v", tgt, err)
	}
}
