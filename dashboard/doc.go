// Package dashboard is gridlink's web view, run as the user by `gridlink
// dashboard`: a small HTTP server on loopback whose pages show the
// overlay map (hubs, their links with round trips and state, nodes at
// their hubs; from the hubs' status sockets through the gridlink API),
// the user's agent's connections with method, path kind and a live
// throughput graph, its credentials' ends (proxy or certificate,
// revocation lists), its virtual network's peers and paths (from the
// agent's control API, agent/control), and transfers: progress, rate,
// ETA and history, started from the page (put, get, or a third-party
// push between two services, which the source runs as the user by
// delegation), paused, resumed and cancelled one or many at a time.
//
// It owns the dashboard's HTTP API (routes in server.go), who may use it
// (auth.go: a token, a cookie, a header for changes, the Host, the peer's
// uid; members.go: the grid's members, if asked for, over HTTPS with
// their grid certificates, read only unless the grid-mapfile maps them to
// the dashboard's account), its live updates (events.go: server-sent events of State), the
// connections' throughput (rates.go: from the agent's byte counters over
// measured intervals, resets and too-close readings skipped), and the
// page itself (assets/, embedded; plain HTML, JavaScript and CSS, nothing
// from elsewhere). Copies are the gridlink API's (gridlink.Copy, with a
// gridlink.CopyHold to pause them); the overlay's state is what the
// agent and hubs report, in package status's shapes; the members'
// chains are package chain's to validate, through the grid's pki.Trust.
//
// Why members by certificate, and so: the issue asks for the dashboard
// to be reached by grid members with their certificates, as Globus and
// GridSite portals were, and a grid member already holds a user
// certificate (or a proxy) the grid's CA issued; a second listener keeps
// the local user's path (loopback, token, uid) exactly as it was, and
// off by default keeps a dashboard from being reachable from elsewhere
// unless its user says so. The handshake admits any certificate and the
// requests are judged, because a TLS alert carries no words and the
// refused end must learn why. Members look but change nothing: the
// transfers run with the local user's credentials, and only a subject the
// grid-mapfile maps to that account (which exec would give its shell)
// may act as it.
package dashboard

import "embed"

// assets are the page, its script and its style sheet.
//
//go:embed assets
var assets embed.FS
