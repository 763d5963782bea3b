package cli

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
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
	f.DurationVar(&sf.maxProxyLife, "max-proxy-lifetime", chain.DefaultMaxProxyLifetime, "refuse peers' proxies valid longer than this (with --ca)")
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

// writeKey writes key to path, passphrase-protected unless plain.
func writeKey(path string, key crypto.Signer, plain bool, passFile string) error {
	var data []byte
	var err error
	if plain {
		data, err = keyfile.Marshal(key)
	} else {
		var pass []byte
		if pass, err = newPassphrase(passFile); err != nil {
			return err
		}
		if len(pass) == 0 {
			return errors.New("an empty passphrase: use --no-passphrase to store the key unprotected")
		}
		data, err = keyfile.Encrypt(key, pass, keyfile.DefaultCost)
	}
	if err != nil {
		return err
	}
	return keyfile.Write(path, data)
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
			if _, err := os.Stat(filepath.Join(dir, ca.DirKey)); err == nil {
				return fmt.Errorf("%s already holds a CA (%s): refusing to overwrite it", dir, ca.DirKey)
			}
			a, err := ca.New(ca.Config{Name: name, Lifetime: time.Duration(years) * 365 * 24 * time.Hour})
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if err := writeKey(filepath.Join(dir, ca.DirKey), a.Key(), plain, passFile); err != nil {
				return err
			}
			crl, err := a.UpdateCRL(nil, ca.CRLUpdate{})
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, ca.DirCert), ca.EncodeCertificates(a.Cert), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, ca.DirCRL), ca.EncodeCRL(crl), 0o644); err != nil {
				return err
			}
			fmt.Printf("CA %q: certificate %s, key %s, revocation list %s (valid until %s: re-sign it with `gridlink ca revoke` before then)\n",
				a.Name(), filepath.Join(dir, ca.DirCert), filepath.Join(dir, ca.DirKey), filepath.Join(dir, ca.DirCRL), crl.NextUpdate.Format(time.DateOnly))
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

// loadCA loads the CA of a directory made by `ca init`.
func loadCA(dir, passFile string) (*ca.Authority, error) {
	data, err := os.ReadFile(filepath.Join(dir, ca.DirCert))
	if err != nil {
		return nil, err
	}
	certs, err := ca.ParseCertificates(data)
	if err != nil {
		return nil, err
	}
	key, err := keyfile.Load(filepath.Join(dir, ca.DirKey), passphrase(passFile, "CA key passphrase: "))
	if err != nil {
		return nil, err
	}
	return ca.Load(certs[0], key)
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
			a, err := loadCA(dir, passFile)
			if err != nil {
				return err
			}
			var revoke []*big.Int
			for _, f := range args {
				data, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				certs, err := ca.ParseCertificates(data)
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				revoke = append(revoke, certs[0].SerialNumber)
			}
			for _, s := range serials {
				n, ok := new(big.Int).SetString(s, 0)
				if !ok {
					return fmt.Errorf("bad serial number %q", s)
				}
				revoke = append(revoke, n)
			}
			path := filepath.Join(dir, ca.DirCRL)
			var prev *x509.RevocationList
			if data, err := os.ReadFile(path); err == nil {
				if prev, err = ca.ParseCRL(data); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
			}
			crl, err := a.UpdateCRL(prev, ca.CRLUpdate{Revoke: revoke})
			if err != nil {
				return err
			}
			tmp := path + ".new"
			if err := os.WriteFile(tmp, ca.EncodeCRL(crl), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			fmt.Printf("revocation list %s number %v: %d revoked, valid until %s; copy it to every hub and node (--crl)\n",
				path, crl.Number, len(crl.RevokedCertificateEntries), crl.NextUpdate.Format(time.DateOnly))
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
			a, err := loadCA(dir, passFile)
			if err != nil {
				return err
			}
			r := ca.Request{Role: ca.Role(role), Name: name, Groups: groups, Aliases: aliases, Lifetime: time.Duration(days) * 24 * time.Hour}
			switch {
			case r.Role == ca.User:
				if keyPath == "" {
					return errors.New("a user certificate needs --key: the user's key file (made, passphrase-protected, if missing)")
				}
				key, err := keyfile.Load(keyPath, passphrase(userPassFile, "user key passphrase: "))
				if errors.Is(err, os.ErrNotExist) {
					_, priv, gerr := ed25519.GenerateKey(nil)
					if gerr != nil {
						return gerr
					}
					if err = writeKey(keyPath, priv, plain, userPassFile); err == nil {
						key = priv
						fmt.Fprintf(os.Stderr, "made the user key %s\n", keyPath)
					}
				}
				if err != nil {
					return err
				}
				r.Key = key.Public()
			case idText != "":
				id, err := identity.ParseID(idText)
				if err != nil {
					return err
				}
				r.Key = id.PublicKey()
			case keyPath != "":
				k, err := identity.LoadOrCreateKey(keyPath)
				if err != nil {
					return err
				}
				r.Key = k.Private().Public()
			default:
				return errors.New("a hub or node certificate needs --key (its identity key file, made if missing) or --id")
			}
			cert, err := a.Issue(r)
			if err != nil {
				return err
			}
			if err := os.WriteFile(out, ca.EncodeCertificates(cert), 0o644); err != nil {
				return err
			}
			fmt.Printf("%s: %s, serial %#x, valid until %s\n", out, cert.Subject, cert.SerialNumber, cert.NotAfter.Format(time.DateOnly))
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

// defaultProxyFile is where proxy init writes and nodes look: like
// Globus's /tmp/x509up_uUID, but in the user's own directory.
func defaultProxyFile() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".gridlink", "proxy.pem")
}

func proxyInitCmd() *cobra.Command {
	var certFile, keyPath, passFile, out string
	var hours float64
	var maxLife time.Duration
	var restrict []string
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
			if err := checkRestriction(restrict); err != nil {
				return err
			}
			data, err := os.ReadFile(certFile)
			if err != nil {
				return err
			}
			chain, err := ca.ParseCertificates(data)
			if err != nil {
				return fmt.Errorf("%s: %w", certFile, err)
			}
			key, err := keyfile.Load(keyPath, passphrase(passFile, "passphrase for "+keyPath+": "))
			if err != nil {
				return err
			}
			o := proxy.Options{Lifetime: life, MaxLifetime: maxLife}
			if len(restrict) > 0 {
				o.Restrict = restrict
			}
			p, err := proxy.New(&proxy.Credential{Chain: chain, Key: key}, o)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
				return err
			}
			if err := proxy.Save(out, p); err != nil {
				return err
			}
			fmt.Printf("proxy %s: %s, valid until %s\n", out, p.Leaf().Subject, p.Leaf().NotAfter.Format(time.DateTime))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&certFile, "cert", "", "your user certificate (PEM)")
	f.StringVar(&keyPath, "key", "", "your user key (passphrase-protected)")
	f.StringVar(&passFile, "passphrase-file", "", "read the key's passphrase from this file (default: $GRIDLINK_PASSPHRASE or the terminal)")
	f.StringVar(&out, "out", defaultProxyFile(), "proxy credential file to write (mode 0600)")
	f.Float64Var(&hours, "hours", 12, "lifetime")
	f.DurationVar(&maxLife, "max-lifetime", proxy.DefaultMaxLifetime, "the longest lifetime --hours may ask for")
	f.StringSliceVar(&restrict, "restrict", nil, "limit the proxy to these services (comma-separated): echo, port-N, or SERVICE@NODEID for the service at that node only")
	_ = c.MarkFlagRequired("cert")
	_ = c.MarkFlagRequired("key")
	return c
}

// checkRestriction checks proxy init's --restrict entries: a service
// restrictions can name (vconn.ParseService), alone or as SERVICE@NODEID.
func checkRestriction(entries []string) error {
	for _, e := range entries {
		svc, _ := proxy.SplitEntry(e)
		if _, err := vconn.ParseService(svc); err != nil {
			return fmt.Errorf("--restrict %s: %w; SERVICE@NODEID limits it to the node with that ID", e, err)
		}
		if err := proxy.CheckEntry(e); err != nil {
			return fmt.Errorf("--restrict %s: %w", e, err)
		}
	}
	return nil
}
