package cli

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gridlink/gridlink"
)

// secFlags are the certificate flags of every command that runs a hub or a
// node. Without --ca the grid is open: any key may connect.
type secFlags struct {
	caFile, certFile, crlFile, proxyFile string
	maxProxyLife                         time.Duration
	unchecked                            bool // testingUncheckedFlag (testingAid builds only)
}

// testingUncheckedFlag is a hidden testing aid, only in a binary built
// with -tags gridlinktesting (testingAid): present --cert's (or --proxy's)
// chain as it is, for lab tests that play outsiders (an expired, revoked
// or tampered chain, a forged proxy), which --ca would otherwise refuse up
// front. Without --ca the process admits every peer while presenting that
// chain: a hub that lets anyone in.
const testingUncheckedFlag = "testing-unchecked-cert"

func (sf *secFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&sf.caFile, "ca", "", "grid CA certificates (PEM): admit only peers they certify; without it the grid is open to any key")
	f.StringVar(&sf.certFile, "cert", "", "this hub's or node's certificate (PEM, from `gridlink cert issue`) for --key")
	f.StringVar(&sf.crlFile, "crl", "", "the CA's revocation list (PEM), reread when it changes")
	f.StringVar(&sf.proxyFile, "proxy", "", "run as a user: a proxy credential (from `gridlink proxy init`) instead of --key and --cert")
	f.DurationVar(&sf.maxProxyLife, "max-proxy-lifetime", gridlink.DefaultMaxProxyLifetime, "refuse peers' proxies valid longer than this (with --ca)")
	if testingAid {
		f.BoolVar(&sf.unchecked, testingUncheckedFlag, false, "TESTING AID, never in production: present --cert or --proxy unchecked (a bad chain as it is); without --ca, admit any peer")
		_ = f.MarkHidden(testingUncheckedFlag)
	}
}

// files checks the flags and returns the credential files they name.
func (sf *secFlags) files() (gridlink.Credentials, error) {
	if sf.caFile != "" && sf.maxProxyLife <= 0 {
		return gridlink.Credentials{}, fmt.Errorf("--max-proxy-lifetime %v: want a positive duration", sf.maxProxyLife)
	}
	c := gridlink.Credentials{CA: sf.caFile, CRL: sf.crlFile, Cert: sf.certFile, Proxy: sf.proxyFile, MaxProxyLifetime: sf.maxProxyLife}
	if sf.unchecked {
		uncheck(&c)
	}
	return c, nil
}

// flagWords says the API's refusals of a set of credential files in the
// flags' words.
func flagWords(err error) error {
	for _, w := range []struct {
		err   error
		words string
	}{
		{gridlink.ErrCRLWithoutCA, "--crl needs --ca (the CA certificates)"},
		{gridlink.ErrCertWithoutCA, "--cert and --proxy need --ca (the CA certificates)"},
		{gridlink.ErrProxyAndCert, "--proxy and --cert exclude each other: a proxy carries its chain"},
		{gridlink.ErrNoCert, "--ca needs --cert (with --key) or --proxy: this end's certificate"},
	} {
		if errors.Is(err, w.err) {
			return errors.New(w.words)
		}
	}
	return err
}

// passphrase returns a function asking for a passphrase once: from the
// file --passphrase-file names, else $GRIDLINK_PASSPHRASE, else the
// terminal (without echo).
func passphrase(file, prompt string) func() ([]byte, error) {
	return func() ([]byte, error) {
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			return []byte(strings.TrimRight(string(b), "\r\n")), nil
		}
		if p := os.Getenv("GRIDLINK_PASSPHRASE"); p != "" {
			return []byte(p), nil
		}
		fd := int(os.Stdin.Fd())
		if !term.IsTerminal(fd) {
			return nil, errors.New("a passphrase is needed: give --passphrase-file or $GRIDLINK_PASSPHRASE, or run on a terminal")
		}
		fmt.Fprint(os.Stderr, prompt)
		p, err := term.ReadPassword(fd)
		fmt.Fprintln(os.Stderr)
		return p, err
	}
}

// newPassphrase asks for a new passphrase, twice on a terminal.
func newPassphrase(file string) ([]byte, error) {
	if file != "" || os.Getenv("GRIDLINK_PASSPHRASE") != "" {
		return passphrase(file, "")()
	}
	p, err := passphrase("", "new passphrase: ")()
	if err != nil {
		return nil, err
	}
	q, err := passphrase("", "again: ")()
	if err != nil {
		return nil, err
	}
	if string(p) != string(q) {
		return nil, errors.New("the passphrases differ")
	}
	return p, nil
}

// keyPassphrase is the passphrase of a key about to be written: nil
// (unprotected) if plain, else a new one, not empty.
func keyPassphrase(plain bool, passFile string) gridlink.Passphrase {
	if plain {
		return nil
	}
	return func() ([]byte, error) {
		pass, err := newPassphrase(passFile)
		if err != nil {
			return nil, err
		}
		if len(pass) == 0 {
			return nil, errors.New("an empty passphrase: use --no-passphrase to store the key unprotected")
		}
		return pass, nil
	}
}

func caCmd() *cobra.Command {
	c := &cobra.Command{Use: "ca", Short: "run the grid's certificate authority: init, revoke"}
	c.AddCommand(caInitCmd(), caRevokeCmd())
	return c
}

func caInitCmd() *cobra.Command {
	var dir, name, passFile string
	var plain bool
	var years int
	c := &cobra.Command{
		Use:   "init",
		Short: "make a grid CA: its key (passphrase-protected), certificate and empty revocation list",
		Example: `  gridlink ca init --dir ~/gridca --name mygrid
  # then give ca.pem to every hub and node (--ca), keep ca.key offline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gridlink.InitCA(gridlink.CAConfig{Dir: dir, Name: name, Lifetime: time.Duration(years) * 365 * 24 * time.Hour,
				NewPassphrase: keyPassphrase(plain, passFile)})
			if err != nil {
				return err
			}
			fmt.Printf("CA %q: certificate %s, key %s, revocation list %s (valid until %s: re-sign it with `gridlink ca revoke` before then)\n",
				f.Name, f.Cert, f.Key, f.CRL, f.NextUpdate.Format(time.DateOnly))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "gridca", "directory for the CA's files")
	f.StringVar(&name, "name", "grid", "the grid's name (the certificates' organization)")
	f.IntVar(&years, "years", 10, "lifetime of the CA certificate")
	f.StringVar(&passFile, "passphrase-file", "", "read the new key's passphrase from this file (default: $GRIDLINK_PASSPHRASE or the terminal)")
	f.BoolVar(&plain, "no-passphrase", false, "store the CA key unprotected (labs and tests only)")
	return c
}

func caRevokeCmd() *cobra.Command {
	var dir, passFile string
	var serials []string
	c := &cobra.Command{
		Use:   "revoke [CERTFILE...]",
		Short: "revoke certificates (files or --serial) and re-sign the revocation list; with none, just re-sign it",
		Example: `  gridlink ca revoke --dir ~/gridca lost-laptop.pem
  gridlink ca revoke --dir ~/gridca --serial 0x1f3a...   # as printed by cert issue`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var revoke []*big.Int
			for _, s := range serials {
				n, ok := new(big.Int).SetString(s, 0)
				if !ok {
					return fmt.Errorf("bad serial number %q", s)
				}
				revoke = append(revoke, n)
			}
			f, err := gridlink.RevokeCA(dir, passphrase(passFile, "CA key passphrase: "), args, revoke)
			if err != nil {
				return err
			}
			fmt.Printf("revocation list %s number %v: %d revoked, valid until %s; copy it to every hub and node (--crl)\n",
				f.CRL, f.CRLNumber, f.Revoked, f.NextUpdate.Format(time.DateOnly))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "gridca", "the CA's directory")
	f.StringArrayVar(&serials, "serial", nil, "serial number to revoke (repeatable)")
	f.StringVar(&passFile, "passphrase-file", "", "read the CA key's passphrase from this file")
	return c
}

func certCmd() *cobra.Command {
	c := &cobra.Command{Use: "cert", Short: "issue certificates for hubs, nodes and users"}
	c.AddCommand(certIssueCmd())
	return c
}

func certIssueCmd() *cobra.Command {
	var dir, passFile, role, name, keyPath, idText, out, userPassFile string
	var groups, aliases []string
	var days int
	var plain bool
	c := &cobra.Command{
		Use:   "issue",
		Short: "issue a hub's, node's or user's certificate, signed by the CA",
		Example: `  gridlink cert issue --dir ~/gridca --role hub  --name das3v --key hub.key --out hub.pem
  gridlink cert issue --dir ~/gridca --role node --name das3v-n1 --id 7k3q... --out n1.pem
  gridlink cert issue --dir ~/gridca --role user --name alice --group physics --key alice.key --out alice.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if days <= 0 {
				return fmt.Errorf("--days %d: want a positive number of days", days)
			}
			r := gridlink.CertRequest{Dir: dir, CAPassphrase: passphrase(passFile, "CA key passphrase: "), Role: role, Name: name,
				Groups: groups, Aliases: aliases, Lifetime: time.Duration(days) * 24 * time.Hour, KeyFile: keyPath, ID: idText,
				UserPassphrase: passphrase(userPassFile, "user key passphrase: "), NewUserPassphrase: keyPassphrase(plain, userPassFile), Out: out}
			is, err := gridlink.IssueCert(r)
			if is.MadeKey != "" {
				fmt.Fprintf(os.Stderr, "made the user key %s\n", is.MadeKey)
			}
			switch {
			case errors.Is(err, gridlink.ErrUserKeyNeeded):
				return errors.New("a user certificate needs --key: the user's key file (made, passphrase-protected, if missing)")
			case errors.Is(err, gridlink.ErrKeyNeeded):
				return errors.New("a hub or node certificate needs --key (its identity key file, made if missing) or --id")
			case err != nil:
				return err
			}
			fmt.Printf("%s: %s, serial %#x, valid until %s\n", is.Out, is.Subject, is.Serial, is.NotAfter.Format(time.DateOnly))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "gridca", "the CA's directory")
	f.StringVar(&passFile, "passphrase-file", "", "read the CA key's passphrase from this file")
	f.StringVar(&role, "role", "node", "hub, node or user")
	f.StringVar(&name, "name", "", "the hub's or node's name, or the user's login")
	f.StringArrayVar(&groups, "group", nil, "a group the holder belongs to, for access control (repeatable)")
	f.StringArrayVar(&aliases, "alias", nil, "another name the hub or node may use besides --name (repeatable)")
	f.StringVar(&keyPath, "key", "", "the key to certify: a hub's or node's identity key file, or the user's key file (made if missing)")
	f.StringVar(&idText, "id", "", "the hub's or node's ID (its public key) instead of --key")
	f.StringVar(&out, "out", "cert.pem", "certificate file to write")
	f.IntVar(&days, "days", 365, "lifetime (never past the CA's)")
	f.StringVar(&userPassFile, "user-passphrase-file", "", "the user key's passphrase, from this file")
	f.BoolVar(&plain, "no-passphrase", false, "store a new user key unprotected (labs and tests only)")
	_ = c.MarkFlagRequired("name")
	return c
}

func proxyCmd() *cobra.Command {
	c := &cobra.Command{Use: "proxy", Short: "short-lived proxy certificates: sign on once, act as the user until it expires"}
	c.AddCommand(proxyInitCmd())
	return c
}

func proxyInitCmd() *cobra.Command {
	var certFile, keyPath, passFile, out string
	var hours float64
	var maxLife time.Duration
	var restrict []string
	var newKey bool
	c := &cobra.Command{
		Use:   "init",
		Short: "make a proxy certificate signed by your user certificate (asks for the key's passphrase once)",
		Example: `  gridlink proxy init --cert alice.pem --key alice.key            # 12 hours, ~/.gridlink/proxy.pem
  gridlink proxy init --cert alice.pem --key alice.key --restrict echo,port-2811@7k3q...   # echo anywhere, transfers at one node
  gridlink node --ca ca.pem --proxy ~/.gridlink/proxy.pem --hub das3v:7946`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			life := time.Duration(hours * float64(time.Hour))
			switch {
			case !(hours > 0) || life <= 0:
				return fmt.Errorf("--hours %v: want a positive lifetime", hours)
			case maxLife <= 0:
				return fmt.Errorf("--max-lifetime %v: want a positive duration", maxLife)
			case life > maxLife:
				return fmt.Errorf("--hours %v: longer than the %v a proxy may live (--max-lifetime; the grid's hubs and nodes refuse proxies longer than their --max-proxy-lifetime, 7 days unless set)", hours, maxLife)
			}
			p, err := gridlink.InitProxy(gridlink.ProxyRequest{CertFile: certFile, KeyFile: keyPath, Passphrase: passphrase(passFile, "passphrase for "+keyPath+": "),
				Out: out, Lifetime: life, MaxLifetime: maxLife, Restrict: restrict, NewKey: newKey})
			var re *gridlink.RestrictionError
			if errors.As(err, &re) {
				return fmt.Errorf("--restrict %s: %w", re.Entry, re)
			}
			if err != nil {
				return err
			}
			fmt.Printf("proxy %s: %s, valid until %s\n", p.Out, p.Subject, p.NotAfter.Format(time.DateTime))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&certFile, "cert", "", "your user certificate (PEM)")
	f.StringVar(&keyPath, "key", "", "your user key (passphrase-protected)")
	f.StringVar(&passFile, "passphrase-file", "", "read the key's passphrase from this file (default: $GRIDLINK_PASSPHRASE or the terminal)")
	f.StringVar(&out, "out", gridlink.DefaultProxyFile(), "proxy credential file to write (mode 0600)")
	f.Float64Var(&hours, "hours", 12, "lifetime")
	f.DurationVar(&maxLife, "max-lifetime", gridlink.DefaultMaxProxyLifetime, "the longest lifetime --hours may ask for")
	f.BoolVar(&newKey, "new-key", false, "a new key even when --out holds a proxy of this certificate (whose key is kept otherwise, so a running agent takes the renewed proxy as the same node)")
	f.StringSliceVar(&restrict, "restrict", nil, "limit the proxy to these services (comma-separated): echo, exec, port-N, dashboard (a dashboard's members), or SERVICE@NODEID for the service at that node only")
	_ = c.MarkFlagRequired("cert")
	_ = c.MarkFlagRequired("key")
	return c
}
