package exec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/pki/pkitest"
)

func TestMapfile(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	alice := g.User(t, "alice", "physics").Chain[0]
	bob := g.User(t, "bob").Chain[0]
	if got, want := SubjectDN(alice), "/O=testgrid/OU=user/CN=alice"; got != want {
		t.Fatalf("SubjectDN = %q, want %q (Globus order: as the certificate holds them)", got, want)
	}
	m, err := ParseMapfile(strings.NewReader(`# the grid's users
   
"/O=testgrid/OU=user/CN=alice" alice,physics   # a comment
CN=bob,OU=user,O=testgrid	bob
"/O=other grid/OU=user/CN=q\"uote\\" carol
`), "grid-mapfile")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Accounts(alice); !slices.Equal(got, []string{"alice", "physics"}) {
		t.Errorf("alice maps to %v", got)
	}
	if got := m.Accounts(bob); !slices.Equal(got, []string{"bob"}) {
		t.Errorf("bob (RFC 4514 form) maps to %v", got)
	}
	if got := m.accounts[`/O=other grid/OU=user/CN=q"uote\`]; !slices.Equal(got, []string{"carol"}) {
		t.Errorf("the escaped subject maps to %v", got)
	}
	if got := m.Accounts(g.User(t, "mallory").Chain[0]); got != nil {
		t.Errorf("an unlisted subject maps to %v", got)
	}
}

// A bad line is an error naming its line.
func TestMapfileErrors(t *testing.T) {
	for _, tc := range []struct {
		text string
		line int
		says string
	}{
		{`"/O=g/CN=a" a` + "\n" + `"/O=g/CN=b"`, 2, "maps to no account"},
		{`"/O=g/CN=a`, 1, "not closed"},
		{`"/O=g/CN=a"a`, 1, "want spaces"},
		{`"/O=g/CN=a" a b`, 1, "unexpected"},
		{`"/O=g/CN=a" a,,b`, 1, "account"},
		{`"/O=g/CN=a" root;rm`, 1, "account"},
		{`"/O=g/CN=a" -x`, 1, "account"},
		{`"/O=g/CN=\a" a`, 1, "backslash"},
		{`"" a`, 1, "empty subject"},
		{`"/O=g/junk" a`, 1, "not TYPE=VALUE"},
		{`"nodn" a`, 1, "want /TYPE=VALUE"},
		{`/O=g/CN=a`, 1, "without accounts"},
		{"# ok\n\"/O=g/CN=a\" a\n\"/O=g/CN=a\" b", 3, "also on line 2"},
		{"\"/O=g/CN=a\" a\x00", 1, "control characters"},
	} {
		_, err := ParseMapfile(strings.NewReader(tc.text), "gm")
		var me *MapfileError
		if !errors.As(err, &me) || me.Line != tc.line || !strings.Contains(err.Error(), tc.says) || !strings.HasPrefix(err.Error(), "gm:") {
			t.Errorf("%q: %v, want line %d saying %q", tc.text, err, tc.line, tc.says)
		}
	}
}

func FuzzParseMapfile(f *testing.F) {
	f.Add("\"/O=g/OU=user/CN=alice\" alice,physics # c\n# x\n\nCN=b,O=g b\n")
	f.Add(`"/O=g/CN=q\"\\" a`)
	f.Add(`"/O=g/CN=a`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMapfile(strings.NewReader(s), "gm")
		if err != nil {
			var me *MapfileError
			if !errors.As(err, &me) || me.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for dn, accts := range m.accounts {
			if checkDN(dn) != nil || len(accts) == 0 {
				t.Fatalf("accepted %q → %v", dn, accts)
			}
			for _, a := range accts {
				if !accountRE.MatchString(a) {
					t.Fatalf("accepted account %q", a)
				}
			}
		}
	})
}
