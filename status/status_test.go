package status

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// schema is every JSON object of the package with its field names, in
// order: what the agent's control socket and the hub's status socket
// answer, and what the lab and other programs parse. Changing a name
// here changes the wire format; a quantity's name ends in its unit.
var schema = map[reflect.Type][]string{
	reflect.TypeFor[Agent]():       {"node", "attach", "hub_choice", "hubs", "no_return", "observed", "conns", "links", "cache", "nat", "port_map", "vip", "credentials"},
	reflect.TypeFor[Conn]():        {"local", "remote", "method", "sent_bytes", "received_bytes"},
	reflect.TypeFor[StreamLink]():  {"stream", "remote", "method", "resumable", "upgrade", "switches"},
	reflect.TypeFor[PathSwitch]():  {"from", "to", "at"},
	reflect.TypeFor[Ping]():        {"addr", "peer", "method", "methods", "setup_ms", "spare", "rtt_ms", "error"},
	reflect.TypeFor[Perf]():        {"addr", "method", "bytes", "seconds", "mbit_per_s", "error"},
	reflect.TypeFor[Diagnosis]():   {"node", "host", "credentials", "nat", "port_map", "target", "methods", "verdict", "lookup_ms"},
	reflect.TypeFor[Credential]():  {"kind", "file", "subject", "not_before", "not_after", "issued", "state", "error"},
	reflect.TypeFor[MethodCheck](): {"method", "ok", "ms", "why", "error", "end", "cause"},
	reflect.TypeFor[NAT]():         {"class", "allocation", "predictable", "at", "error"},
	reflect.TypeFor[PortMap]():     {"enabled", "mapped", "protocol", "gateway", "internal", "external", "advertised", "lease_s", "expires", "renewals", "at", "error"},
	reflect.TypeFor[Hub]():         {"name", "id", "addr", "routes", "links", "nodes"},
	reflect.TypeFor[Route]():       {"hub", "name", "reachable", "next_hop", "hops", "latency_ms", "state", "addrs", "nodes"},
	reflect.TypeFor[Link]():        {"peer", "name", "role", "remote", "dialed", "rtt_ms", "circuits", "queued_bytes", "connections", "congestion"},
	reflect.TypeFor[Copy]():        {"files", "dirs", "failed", "bytes", "sent_bytes", "kept_bytes", "attempts", "seconds", "mbit_per_s", "errors", "method", "streams", "failure", "push_error"},
	reflect.TypeFor[VIP]():         {"device", "addrs", "mtu_bytes", "claim", "peers", "drops", "names", "rules"},
	reflect.TypeFor[VIPNames]():    {"zone", "server", "resolver"},
	reflect.TypeFor[VIPPeer](): {"id", "name", "addrs", "path", "paths", "connected", "queued_packets", "sent_packets", "sent_bytes", "recv_packets", "recv_bytes",
		"queue_full_packets", "conn_lost_packets", "spoofed_packets", "denied_packets", "refused_packets", "path_switches", "redials"},
	reflect.TypeFor[VIPDrops](): {"malformed_packets", "not_unicast_packets", "source_not_ours_packets", "too_big_packets", "no_route_packets", "queue_full_packets",
		"conn_lost_packets", "no_connection_packets", "spoofed_packets", "not_for_us_packets", "device_write_packets", "denied_packets", "bad_fragment_packets"},
	reflect.TypeFor[CopyError]():        {"path", "error", "changed"},
	reflect.TypeFor[NodeCounters]():     {"paths", "setups", "setup_times"},
	reflect.TypeFor[PathBytes]():        {"path", "sent_bytes", "received_bytes", "open"},
	reflect.TypeFor[SetupCount]():       {"method", "outcome", "count"},
	reflect.TypeFor[Histogram]():        {"method", "upper_s", "counts", "count", "sum_s"},
	reflect.TypeFor[HubCounters]():      {"switched_bytes", "circuits_opened", "refusals"},
	reflect.TypeFor[Refusal]():          {"what", "reason", "count"},
	reflect.TypeFor[TransferCounters](): {"ops", "moved"},
	reflect.TypeFor[TransferMoved]():    {"op", "bytes"},
	reflect.TypeFor[TransferOp]():       {"op", "outcome", "sessions", "files", "failed", "sent_bytes", "kept_bytes"},
}

// Every field of every shape names itself in a tag (no Go names on the
// wire), and the names are the schema's.
func TestSchema(t *testing.T) {
	for typ, want := range schema {
		var got []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, ok := f.Tag.Lookup("json")
			name, _, _ := strings.Cut(tag, ",")
			if !ok || name == "" || name == "-" {
				t.Errorf("%s.%s has no JSON name", typ.Name(), f.Name)
				continue
			}
			got = append(got, name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's JSON names: %q, want %q", typ.Name(), got, want)
		}
	}
}

// The hub line of `gridlink status` says when the node is away from its
// first hub, and whether it returns there.
func TestHubWords(t *testing.T) {
	for _, c := range []struct {
		st   Agent
		want string
	}{
		{Agent{HubChoice: 1, Hubs: 2}, "(aaaaaaaaaa)"}, // the zero ID, short
		{Agent{HubChoice: 2, Hubs: 3}, "its hub number 2 of 3: away from its first, which it probes to return to"},
		{Agent{HubChoice: 2, Hubs: 2, NoReturn: true}, "its hub number 2 of 2: away from its first, where it does not return (--no-return-home)"},
		{Agent{Attach: "attaching to a:1: refused", HubChoice: 0, Hubs: 2}, "attaching to a:1: refused"},
		{Agent{Node: identity.Machine{HubName: "h\x1b[2J"}}, `"h\x1b[2J" (`},               // escaped (issue 32)
		{Agent{Attach: "refused: bad name \x1b[2J", Hubs: 1}, `refused: bad name \x1b[2J`}, // escaped
	} {
		got := c.st.HubWords()
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want it to say %q", c.st, got, c.want)
		}
		if c.st.HubChoice <= 1 && strings.Contains(got, "away") {
			t.Errorf("%+v: %q says away at its first hub or with none", c.st, got)
		}
	}
}

// A credential's state and words through its lifetime: valid, expiring
// in the last tenth (a proxy's at most its last hour), expired with the
// remedy and what the node suffers.
func TestCredentialStates(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	p := Credential{Kind: CredProxy, File: "/p.pem", Subject: "CN=1,OU=user", NotBefore: t0.Add(-5 * time.Minute), Issued: t0, NotAfter: t0.Add(12 * time.Hour)}
	for _, tc := range []struct {
		at    time.Duration
		state string
		words string
	}{
		{time.Hour, CredValid, "is valid, valid until 2026-12-07T12:00:00Z (in 11h0m0s)"},
		{11*time.Hour + time.Second, CredExpiring, "expires in 59m59s (valid until 2026-12-07T12:00:00Z): renew it with `gridlink proxy init`"},
		{12 * time.Hour, CredExpired, "the proxy CN=1,OU=user (/p.pem) expired at 2026-12-07T12:00:00Z: renew it with `gridlink proxy init`; until then peers refuse this node"},
	} {
		now := t0.Add(tc.at)
		if s, w := p.StateAt(now), p.Words(now); s != tc.state || !strings.Contains(w, tc.words) {
			t.Errorf("at %v: %s, %q; want %s, %q", tc.at, s, w, tc.state, tc.words)
		}
	}
	two := Credential{Kind: CredProxy, NotBefore: t0.Add(-5 * time.Minute), Issued: t0, NotAfter: t0.Add(2 * time.Minute)}
	if w := two.Window(); w != 12*time.Second {
		t.Errorf("a two-minute proxy's window: %v, want 12s", w)
	}
	crl := Credential{Kind: CredCRL, File: "/crl.pem", NotBefore: t0, NotAfter: t0.Add(7 * 24 * time.Hour)}
	if w := crl.Words(t0.Add(8 * 24 * time.Hour)); !strings.Contains(w, "this node refuses every peer of that CA") || !strings.Contains(w, "/crl.pem") {
		t.Errorf("a stale list: %q", w)
	}
}
