// Package dnstest is a DNS server on loopback for tests: it answers A and
// AAAA queries for the names it is given, over UDP, so that a client's own
// resolver (a gRPC target "dns://<server>/<name>:<port>") finds one name
// at several addresses, as a DNS name with a record per replica gives it
// in production. Every other query gets an empty answer; a name it does
// not know, NXDOMAIN. The records can change while it runs (Set).
package dnstest

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server is a running DNS server. Its methods are safe for concurrent
// use.
type Server struct {
	conn net.PacketConn
	done chan struct{}

	mu      sync.Mutex
	records map[string][]netip.Addr // by lower-case name with the final dot
}

// Start runs a DNS server on a loopback UDP port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dnstest: listen: %v", err)
	}
	s := &Server{conn: conn, done: make(chan struct{}), records: map[string][]netip.Addr{}}
	go s.serve()
	t.Cleanup(func() {
		_ = conn.Close()
		<-s.done
	})
	return s
}

// Addr is the server's address, host:port.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Set makes name (e.g. "cp.muster.test") resolve to addrs, IPv4 ones in
// A answers and IPv6 ones in AAAA answers, in the order given; no addrs
// removes the name.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := canonical(name)
	if len(addrs) == 0 {
		delete(s.records, key)
		return
	}
	s.records[key] = append([]netip.Addr(nil), addrs...)
}

func canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func (s *Server) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(out, from)
		}
	}
}

// answer is the reply to the query q; false for a message it cannot
// parse (no reply, as a server drops garbage).
func (s *Server) answer(q []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil, false
	}
	question, err := p.Question()
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	addrs, known := s.records[strings.ToLower(question.Name.String())]
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(question) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	res := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 1}
	for _, a := range addrs {
		switch {
		case question.Type == dnsmessage.TypeA && a.Is4():
			if b.AResource(res, dnsmessage.AResource{A: a.As4()}) != nil {
				return nil, false
			}
		case question.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
			if b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: a.As16()}) != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
