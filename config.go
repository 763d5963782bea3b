package gridlink

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
)

// Config configures a node. Its zero value works: a node named after the
// host, with a fresh key, in an open grid, making direct connections only,
// logging nothing.
type Config struct {
	// Name is the node's name, unique in the grid. Empty: the name its
	// certificate certifies (Credentials.Cert), else FallbackName, else
	// the host name. A name given here is used as it is (a certificate
	// that does not certify it gets the node refused, naming it).
	Name string
	// FallbackName is the name when Name is empty and no certificate
	// certifies one; empty: the host name.
	FallbackName string
	// Key is the node's identity key; KeyFile, if Key is zero, a file to
	// load it from (made if missing). Neither: a fresh key. With
	// Credentials.Proxy the proxy's key is used instead (StartAttached's
	// node: a fresh key, certified by a proxy of the proxy; oneshot.go).
	Key     identity.Key
	KeyFile string
	// Credentials are the certificate files; zero: an open grid.
	Credentials Credentials
	// Hubs are the hubs to attach to, in order of preference: HOST:PORT
	// or ssh://[USER@]HOST[:PORT]/[TARGET:]PORT (through an sshd,
	// configured by SSH or the user's ~/.ssh files). None: direct
	// connections only, unless Discover finds the site's hub.
	Hubs []string
	// NoReturnHome keeps the node on the hub it re-attached to after its
	// hub was lost. Zero: a node attached to a hub other than the first of
	// Hubs (its home) probes the hubs before it (2 s, doubling to 30 s)
	// and moves back to the first that admits it, attached there before
	// it leaves the other; each move is logged, naming both hubs and why.
	NoReturnHome bool
	// Discover, without Hubs, finds the site's hubs by UDP multicast
	// (waiting 2 s for answers) and attaches to them; Discovered, if set,
	// is told the first one found.
	Discover   bool
	Discovered func(name string, addr netip.AddrPort)
	// Ports confines the direct listener to a range; zero: any port.
	Ports PortRange
	// ListenAddr binds the direct listener to one address (then the only
	// one advertised); empty: all interfaces.
	ListenAddr string
	// Prefer are networks to try first for direct connections.
	Prefer []netip.Prefix
	// PortMap asks the NAT gateway for an inbound port (UPnP IGD,
	// NAT-PMP) and advertises it; deleted when the node stops. Off by
	// default: those protocols probe the local network.
	PortMap bool
	// SSH configures ssh:// hubs and, when set, direct connections
	// through the targets' sshds too; nil: ssh:// hubs with ~/.ssh
	// defaults, no sshd tunnels.
	SSH *SSHConfig
	// Logger receives the node's connection-setup log (each record with
	// node=NAME); nil: no log.
	Logger *slog.Logger

	// creds, if set, are credentials already made (a delegated proxy's
	// transient node): they replace Key and Credentials.
	creds *pki.Credentials
}

// PortRange is a range of TCP ports, Lo to Hi inclusive; zero: any port.
type PortRange = direct.PortRange

// SSHConfig says how to reach sshds: the client config file, known hosts,
// identity files (each with ~/.ssh defaults).
type SSHConfig = direct.SSHConfig

// Key is a node's or hub's identity key; ID its public half, which names
// it.
type (
	Key     = identity.Key
	ID      = identity.ID
	Machine = identity.Machine
)

// Credentials are the files that prove who a hub or node is and whom it
// admits. The zero value is an open grid: every connection proves its
// peer's key, but any key is admitted.
type Credentials struct {
	// CA is a file of the grid CA's certificates (PEM): admit only peers
	// they certify. Empty: an open grid (then Cert, CRL and Proxy must be
	// empty too).
	CA string
	// CRL is the CA's revocation list (PEM or DER), or a directory of
	// them, reread when it changes.
	CRL string
	// CADir is a trust directory as grid hosts keep one
	// (/etc/grid-security/certificates, X509_CERT_DIR): the CAs of the
	// federation (HASH.0), which certify users only, and their
	// revocation lists (HASH.r0), reread when it changes (pki.TrustFiles).
	// A CA that is a directory is read as CADir.
	CADir string
	// Cert is this end's certificate chain (PEM) for its key; Proxy a
	// user's proxy credential instead of the key and Cert. With CA one of
	// them is needed.
	Cert, Proxy string
	// MaxProxyLifetime refuses peers' proxies valid longer; zero: 7 days.
	MaxProxyLifetime time.Duration

	// unchecked presents Cert or Proxy as it is (TestingUnchecked, a
	// testing aid in -tags gridlinktesting builds only).
	unchecked bool
}

// Why a set of credential files cannot be used; the cli names its flags
// for them.
var (
	ErrCRLWithoutCA      = errors.New("a revocation list needs the CA certificates")
	ErrCertWithoutCA     = errors.New("a certificate or proxy needs the CA certificates")
	ErrNoCert            = errors.New("the CA certificates need this end's certificate (with its key) or a proxy")
	ErrProxyAndCert      = errors.New("a proxy and a certificate exclude each other: a proxy carries its chain")
	ErrMaxProxyLifetime  = errors.New("the longest proxy lifetime admitted must be positive")
	defaultDiscoveryWait = 2 * time.Second
)

// Load returns the credentials for key (or the proxy's key), and the
// trust they judge peers by, nil for an open grid.
func (c Credentials) Load(key Key) (*pki.Credentials, *pki.Trust, error) {
	var trust *pki.Trust
	switch {
	case c.CA != "" || c.CADir != "":
		max := c.MaxProxyLifetime
		if max == 0 {
			max = chain.DefaultMaxProxyLifetime
		}
		if max < 0 {
			return nil, nil, fmt.Errorf("%w: %v", ErrMaxProxyLifetime, max)
		}
		var err error
		files := pki.TrustFiles{CA: c.CA, CRL: c.CRL, Dir: c.CADir}
		if fi, err := os.Stat(c.CA); err == nil && fi.IsDir() && c.CADir == "" {
			files.CA, files.Dir = "", c.CA
		}
		if trust, err = pki.LoadTrustFiles(files, chain.Config{MaxProxyLifetime: max}); err != nil {
			return nil, nil, err
		}
	case c.CRL != "":
		return nil, nil, ErrCRLWithoutCA
	case c.unchecked && (c.Cert != "" || c.Proxy != ""):
		// a testing aid's hub that presents a chain and admits anyone
	case c.Cert != "" || c.Proxy != "":
		return nil, nil, ErrCertWithoutCA
	default:
		creds, err := pki.NewCredentials(key)
		return creds, nil, err
	}
	var certs []*x509.Certificate
	switch {
	case c.Proxy != "":
		if c.Cert != "" {
			return nil, nil, ErrProxyAndCert
		}
		pc, err := proxy.Load(c.Proxy)
		if err != nil {
			return nil, nil, err
		}
		if pc, err = pki.NodeProxy(pc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.Proxy, err)
		}
		if key, err = pki.ProxyKey(pc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.Proxy, err)
		}
		certs = pc.Chain
	case c.Cert != "":
		data, err := os.ReadFile(c.Cert)
		if err != nil {
			return nil, nil, err
		}
		if certs, err = ca.ParseCertificates(data); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.Cert, err)
		}
	default:
		return nil, nil, ErrNoCert
	}
	if c.unchecked {
		return pki.Unchecked(key, certs, trust), trust, nil
	}
	creds, err := pki.Certified(key, certs, trust)
	if err != nil {
		return nil, nil, err
	}
	return creds, trust, nil
}

// LoadKey loads the key file at path, made if missing; "" means a fresh
// key.
func LoadKey(path string) (Key, error) { return loadKey(Key{}, path) }

// FoundHub is a hub that answered discovery: its name, ID, and the
// address to attach to.
type FoundHub = hubserver.Found

// DiscoverHubs finds this site's hubs (those run with Announce) by UDP
// multicast on this host's networks, waiting 2 s for answers; it fails if
// none answers.
func DiscoverHubs(ctx context.Context) ([]FoundHub, error) {
	return hubserver.Discover(ctx, defaultDiscoveryWait)
}

// loadKey is the key of a node or hub: key, else the file's (made if
// missing), else a fresh one.
func loadKey(key Key, file string) (Key, error) {
	switch {
	case !key.IsZero():
		return key, nil
	case file != "":
		return identity.LoadOrCreateKey(file)
	}
	return identity.NewKey()
}

// HostName is this host's name without its domain, the name a hub or
// node goes by when it is given none: a name has no dot (NAME.grid names
// the node NAME; see identity.CheckName for what a name may be).
func HostName() string {
	host, _ := os.Hostname()
	return identity.ShortName(host)
}

// name is the name a hub or node of creds goes by: the one given, else the
// one its certificate certifies, else fallback, else the host name.
func pickName(given, fallback string, creds *pki.Credentials) string {
	if given != "" {
		return given
	}
	if fallback == "" {
		fallback = HostName()
	}
	return creds.DefaultName(fallback)
}

// node is the one place a Config becomes the lower layer's: the key and
// credentials loaded, the name chosen, the site's hubs discovered if
// asked to.
func (c Config) node(ctx context.Context) (vconn.Config, error) {
	creds := c.creds
	if creds == nil {
		key, err := loadKey(c.Key, c.KeyFile)
		if err != nil {
			return vconn.Config{}, err
		}
		if creds, _, err = c.Credentials.Load(key); err != nil {
			return vconn.Config{}, err
		}
	}
	hubs := c.Hubs
	if c.Discover && len(hubs) == 0 {
		found, err := DiscoverHubs(ctx)
		if err != nil {
			return vconn.Config{}, err
		}
		for _, f := range found {
			hubs = append(hubs, f.Addr.String())
		}
		if c.Discovered != nil {
			c.Discovered(found[0].Name, found[0].Addr)
		}
	}
	name := pickName(c.Name, c.FallbackName, creds)
	vc := vconn.Config{Name: name, Key: creds.Key, Creds: creds, Hubs: hubs, NoReturn: c.NoReturnHome, Ports: c.Ports, ListenAddr: c.ListenAddr,
		Preferred: c.Prefer, PortMap: c.PortMap, SSH: c.SSH}
	if c.Logger != nil {
		vc.Logf = logfOf(c.Logger.With("node", name))
	}
	return vc, nil
}

// logfOf turns a logger into a lower package's Logf: each line a record at
// level Info whose message is the line.
func logfOf(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}
