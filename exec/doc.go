// Package exec runs commands on other nodes of a grid, as ssh runs them on
// other hosts: the exec service a node agent offers on Port (with
// gridlink node --allow-exec), and its client (Run), which gridlink exec
// calls through the caller's own agent. The service maps the caller's
// certificate or proxy subject to a local account through a grid-mapfile
// (mapfile.go, Globus' format), looks the account up through the
// system's name service (account.go: getent; refused when it is unknown,
// cannot be looked up, or its shell refuses logins), runs the command as
// that account with the account's login shell (setuid, setgid and
// supplementary groups when the agent runs as root; an agent of any other
// user runs commands only for callers mapped to its own user) and the
// caller's environment as the node accepts it (env.go: an accept list as
// sshd's AcceptEnv, and variables never passed), streams stdin, stdout
// and stderr, and returns the exit status (frame.go: the framing on the
// connection).
// Every run and every refusal is logged at the target with the caller's
// subject; a refusal reaches the caller in the same words.
//
// What a proxy restricted to other services, a revoked certificate or
// another grid's certificate meet is the overlay handshake's refusal
// (package vconn: the service goes by the name "exec" in proxy
// restrictions). Choosing nodes, batch systems and staging files are not
// this package's.
package exec
