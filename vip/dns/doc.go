// Package dns is the name responder of gridlink's virtual IP network
// (issue 19): a small DNS server a node runs so that unmodified programs
// (ssh, mpirun hostfiles, mount) resolve NODE.grid to the node's virtual
// addresses.
//
// It owns:
//   - the answers (answer.go): A and AAAA for NAME.ZONE. (the zone
//     configurable, default "grid", names matched in any case) from a
//     Lookup function, with a short TTL; NXDOMAIN (with the zone's SOA, for
//     negative caching) for a name no node holds (Lookup's ErrNotFound),
//     NODATA for a family the node has no address of, SERVFAIL when the
//     lookup fails otherwise, REFUSED for names outside the zone (so that
//     the host's resolver moves on to its next server), and PTR for the
//     reverse names of the virtual prefixes when a LookupAddr is given;
//   - the strict decoding of queries: one question, a query, opcode QUERY,
//     class IN, no answer or authority records, at most one EDNS OPT
//     record; a query that fails these gets FORMERR (NOTIMP for another
//     opcode), one whose header cannot be read is dropped;
//   - the cache (cache.go): answers and not-founds kept for the TTL, a
//     bounded number of names, one lookup at a time per name;
//   - the limits (cache.go): per client, queries (past them the client's
//     queries are dropped) and lookups that miss the cache (past them:
//     SERVFAIL), and all clients' lookups together, so that a program
//     looping on lookups, or a flood of random names, reaches the hubs at
//     most at the configured rate;
//   - serving (server.go): UDP and TCP (two-byte length prefix, RFC 1035
//     4.2.2) on one address, with bounded TCP connections and idle time,
//     and the counters (Stats).
//
// It leaves out: where the names come from (the Lookup function: the
// gridlink package asks the hubs through the node's session) and the
// host's resolver configuration (the gridlink package, dns.go).
package dns
