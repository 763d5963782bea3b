package dns

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// Limits on a query. A query larger than MaxQuery bytes is refused
// (FORMERR if its header can be read); answers to UDP queries are at most
// udpAnswer bytes (ours are far smaller: at most two addresses).
const (
	MaxQuery  = 4096
	udpAnswer = 1232 // the EDNS payload size we announce (DNS flag day 2020)
)

// nodeName is a node name as the hubs allow one (identity's rule).
var nodeName = regexp.MustCompile(`^[a-z0-9_][a-z0-9_.-]{0,62}$`)

// Handle answers one query message from client (tcp: it came over TCP, so
// the answer is not bounded to a UDP payload). It returns the answer's
// bytes, or nil when the query is dropped (unreadable header, a response,
// or the client over its query limit).
func (s *Server) Handle(ctx context.Context, client netip.Addr, query []byte, tcp bool) []byte {
	s.count(&s.stats.Queries)
	if len(query) < 12 {
		s.count(&s.stats.Dropped)
		return nil
	}
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		// no header to answer to, or an answer sent to us (a
		// reflection): never answer an answer.
		s.count(&s.stats.Dropped)
		return nil
	}
	if !s.allowQuery(client) {
		s.count(&s.stats.Limited)
		return nil
	}
	q, edns, rcode := parseQuery(&p, h, len(query))
	if rcode != dnsmessage.RCodeSuccess {
		s.count(&s.stats.FormErr)
		return s.reply(h, q, edns, rcode, nil, false, tcp)
	}
	ans, rcode, soa := s.answer(ctx, client, q)
	return s.reply(h, q, edns, rcode, ans, soa, tcp)
}

// parseQuery reads the rest of a query after its header: its one
// question, and whether it carries an EDNS OPT record. A query that is not
// one question of class IN, with no answers or authorities and at most
// one OPT record, is FORMERR; another opcode than QUERY is NOTIMP.
func parseQuery(p *dnsmessage.Parser, h dnsmessage.Header, size int) (q *dnsmessage.Question, edns bool, rcode dnsmessage.RCode) {
	if h.OpCode != 0 {
		return nil, false, dnsmessage.RCodeNotImplemented
	}
	if size > MaxQuery {
		return nil, false, dnsmessage.RCodeFormatError
	}
	first, err := p.Question()
	if err != nil {
		return nil, false, dnsmessage.RCodeFormatError
	}
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
		return nil, false, dnsmessage.RCodeFormatError // more than one question, or junk
	}
	if first.Class != dnsmessage.ClassINET {
		return &first, false, dnsmessage.RCodeFormatError
	}
	if _, err := p.AnswerHeader(); err != dnsmessage.ErrSectionDone {
		return &first, false, dnsmessage.RCodeFormatError
	}
	if err := p.SkipAllAnswers(); err != nil {
		return &first, false, dnsmessage.RCodeFormatError
	}
	if _, err := p.AuthorityHeader(); err != dnsmessage.ErrSectionDone {
		return &first, false, dnsmessage.RCodeFormatError
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return &first, false, dnsmessage.RCodeFormatError
	}
	for n := 0; ; n++ {
		rh, err := p.AdditionalHeader()
		if err == dnsmessage.ErrSectionDone {
			break
		}
		if err != nil || n > 0 || rh.Type != dnsmessage.TypeOPT || rh.Name.String() != "." {
			return &first, false, dnsmessage.RCodeFormatError
		}
		if _, err := p.OPTResource(); err != nil {
			return &first, false, dnsmessage.RCodeFormatError
		}
		edns = true
	}
	return &first, edns, dnsmessage.RCodeSuccess
}

// answer is what s answers question q with: its answer records, the
// rcode, and whether to add the zone's SOA in the authority section (a
// negative answer in the zone).
func (s *Server) answer(ctx context.Context, client netip.Addr, q *dnsmessage.Question) ([]dnsmessage.Resource, dnsmessage.RCode, bool) {
	name := strings.ToLower(q.Name.String())
	if name == s.zone {
		if q.Type == dnsmessage.TypeSOA {
			return []dnsmessage.Resource{s.soa()}, dnsmessage.RCodeSuccess, false
		}
		return nil, dnsmessage.RCodeSuccess, true
	}
	if node, ok := strings.CutSuffix(name, "."+s.zone); ok {
		if !nodeName.MatchString(node) {
			s.count(&s.stats.NXDomain)
			return nil, dnsmessage.RCodeNameError, true // no node can be named so: no lookup
		}
		addrs, err := s.resolve(ctx, client, node)
		switch {
		case errors.Is(err, ErrNotFound):
			s.count(&s.stats.NXDomain)
			return nil, dnsmessage.RCodeNameError, true
		case err != nil:
			s.count(&s.stats.ServFail)
			return nil, dnsmessage.RCodeServerFailure, false
		}
		var out []dnsmessage.Resource
		for _, a := range addrs {
			switch {
			case a.Is4() && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL):
				out = append(out, dnsmessage.Resource{Header: s.header(q.Name, dnsmessage.TypeA), Body: &dnsmessage.AResource{A: a.As4()}})
			case a.Is6() && !a.Is4In6() && (q.Type == dnsmessage.TypeAAAA || q.Type == dnsmessage.TypeALL):
				out = append(out, dnsmessage.Resource{Header: s.header(q.Name, dnsmessage.TypeAAAA), Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
		return out, dnsmessage.RCodeSuccess, len(out) == 0
	}
	if a, ok := reverseAddr(name); ok && s.cfg.LookupAddr != nil && s.inPrefixes(a) {
		if q.Type != dnsmessage.TypePTR && q.Type != dnsmessage.TypeALL {
			return nil, dnsmessage.RCodeSuccess, false
		}
		node, err := s.resolveAddr(ctx, client, a)
		switch {
		case errors.Is(err, ErrNotFound):
			s.count(&s.stats.NXDomain)
			return nil, dnsmessage.RCodeNameError, false
		case err != nil:
			s.count(&s.stats.ServFail)
			return nil, dnsmessage.RCodeServerFailure, false
		}
		target, err := dnsmessage.NewName(node + "." + s.zone)
		if err != nil {
			s.count(&s.stats.ServFail)
			return nil, dnsmessage.RCodeServerFailure, false
		}
		return []dnsmessage.Resource{{Header: s.header(q.Name, dnsmessage.TypePTR), Body: &dnsmessage.PTRResource{PTR: target}}}, dnsmessage.RCodeSuccess, false
	}
	s.count(&s.stats.Refused)
	return nil, dnsmessage.RCodeRefused, false
}

func (s *Server) inPrefixes(a netip.Addr) bool {
	for _, p := range s.cfg.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (s *Server) header(name dnsmessage.Name, t dnsmessage.Type) dnsmessage.ResourceHeader {
	return dnsmessage.ResourceHeader{Name: name, Type: t, Class: dnsmessage.ClassINET, TTL: s.ttl}
}

// soa is the zone's SOA record; its minimum (the negative-caching time,
// RFC 2308) is the TTL.
func (s *Server) soa() dnsmessage.Resource {
	zone := dnsmessage.MustNewName(s.zone)
	return dnsmessage.Resource{Header: s.header(zone, dnsmessage.TypeSOA), Body: &dnsmessage.SOAResource{
		NS: dnsmessage.MustNewName("ns." + s.zone), MBox: dnsmessage.MustNewName("hostmaster." + s.zone),
		Serial: 1, Refresh: s.ttl, Retry: s.ttl, Expire: s.ttl, MinTTL: s.ttl}}
}

// reply builds the answer message; nil if it cannot (never for our own
// records).
func (s *Server) reply(h dnsmessage.Header, q *dnsmessage.Question, edns bool, rcode dnsmessage.RCode, ans []dnsmessage.Resource, soa, tcp bool) []byte {
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RCode: rcode,
		Authoritative: rcode == dnsmessage.RCodeSuccess || rcode == dnsmessage.RCodeNameError}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if q != nil {
		if err := b.Question(*q); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, r := range ans {
		var err error
		switch body := r.Body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(r.Header, *body)
		case *dnsmessage.AAAAResource:
			err = b.AAAAResource(r.Header, *body)
		case *dnsmessage.PTRResource:
			err = b.PTRResource(r.Header, *body)
		case *dnsmessage.SOAResource:
			err = b.SOAResource(r.Header, *body)
		}
		if err != nil {
			return nil
		}
	}
	if err := b.StartAuthorities(); err != nil {
		return nil
	}
	if soa {
		r := s.soa()
		if err := b.SOAResource(r.Header, *r.Body.(*dnsmessage.SOAResource)); err != nil {
			return nil
		}
	}
	if err := b.StartAdditionals(); err != nil {
		return nil
	}
	if edns {
		var oh dnsmessage.ResourceHeader
		if err := oh.SetEDNS0(udpAnswer, dnsmessage.RCodeSuccess, false); err != nil {
			return nil
		}
		if err := b.OPTResource(oh, dnsmessage.OPTResource{}); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil || (!tcp && len(out) > udpAnswer) {
		return nil
	}
	return out
}
