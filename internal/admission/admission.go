// Package admission shares a bounded resource a server holds for its
// clients (event streams, connections, checks in flight) among them: a
// client group may hold at most its share, the whole pool is bounded, and
// the last places of the pool are kept for groups that hold nothing, so
// that a new or reconnecting client is admitted while others fill their
// shares (docs/SECURITY.md, "What is exposed").
//
// Clients are grouped by address: an IPv6 address by its /64 (one host's
// usual allocation: its addresses are free to it), an IPv4 address by
// itself unless a Pool groups them by a shorter prefix.
//
// A pool of connections may keep a few places beyond its bound for the
// host's own clients (127.0.0.1 and ::1: a local health check, a local
// Prometheus, an operator's curl), so that they are admitted while other
// clients hold every place; those places take nothing from the others.
package admission

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
)

// Pool admits holders of one resource. Its fields are set before first
// use and not changed after; it is safe for concurrent use.
type Pool struct {
	// What names the resource in refusals ("event streams").
	What string
	// Max bounds the places held at once, all groups together.
	Max int
	// Share bounds the places one group holds at once.
	Share int
	// Reserve is how many of the Max places only a group that holds none
	// may take.
	Reserve int
	// Loopback is how many places beyond Max only clients at 127.0.0.1 or
	// ::1 exactly may take, when the other bounds refuse them a place
	// (never beyond their group's Share). Other loopback addresses
	// (127.0.0.2, ...) are clients like any other.
	Loopback int
	// IPv4Bits groups IPv4 clients by a prefix of that many bits; 0 means
	// 32 (each address its own group).
	IPv4Bits int

	refused atomic.Uint64

	mu      sync.Mutex
	held    int // places within Max
	extra   int // places beyond Max, of the Loopback ones
	byGroup map[string]int
}

// Acquire takes a place for the client at remoteAddr (host:port, or a
// bare host), or returns an error saying which bound refused it.
// release gives the place back; calling it more than once gives one back.
// A client at 127.0.0.1 or ::1 that the other bounds refuse takes one of
// the Loopback places, if one is free and its group is within its share.
func (p *Pool) Acquire(remoteAddr string) (release func(), err error) {
	g := p.Group(remoteAddr)
	local := p.Loopback > 0 && isHostLoopback(remoteAddr)
	p.mu.Lock()
	defer p.mu.Unlock()
	mine := p.byGroup[g]
	switch {
	case mine >= p.Share:
		err = fmt.Errorf("one client may hold at most %d %s at once", p.Share, p.What)
	case p.held >= p.Max:
		err = fmt.Errorf("at most %d %s are held at once", p.Max, p.What)
	case mine > 0 && p.held >= p.Max-p.Reserve:
		err = fmt.Errorf("the last %d of %d %s are kept for clients that hold none", p.Reserve, p.Max, p.What)
	}
	beyond := err != nil && local && mine < p.Share && p.extra < p.Loopback
	if err != nil && !beyond {
		p.refused.Add(1)
		return nil, err
	}
	if p.byGroup == nil {
		p.byGroup = map[string]int{}
	}
	if beyond {
		p.extra++
	} else {
		p.held++
	}
	p.byGroup[g]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if beyond {
				p.extra--
			} else {
				p.held--
			}
			if p.byGroup[g]--; p.byGroup[g] == 0 {
				delete(p.byGroup, g)
			}
		})
	}, nil
}

// Held returns the places held, all groups together, the Loopback ones
// included.
func (p *Pool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held + p.extra
}

// Refused returns how many times Acquire refused a place.
func (p *Pool) Refused() uint64 { return p.refused.Load() }

// Group returns the group of the client at remoteAddr: Group(remoteAddr,
// p.IPv4Bits).
func (p *Pool) Group(remoteAddr string) string { return Group(remoteAddr, p.IPv4Bits) }

// isHostLoopback reports whether remoteAddr (host:port, or a bare host) is
// 127.0.0.1 or ::1 (an IPv4-mapped 127.0.0.1 included).
func isHostLoopback(remoteAddr string) bool {
	ip, ok := parseHost(remoteAddr)
	return ok && (ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback())
}

// parseHost returns the IP address of remoteAddr's host, unmapped and
// without its zone, or false if the host is not an IP address.
func parseHost(remoteAddr string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

// Group returns the group of the client at remoteAddr (host:port, or a
// bare host): its IPv6 /64, its IPv4 address or, with ipv4Bits in 1..31,
// its IPv4 prefix of that length, or remoteAddr's host itself when it is
// not an IP address. Every limit per client keys clients by it.
func Group(remoteAddr string, ipv4Bits int) string {
	ip, ok := parseHost(remoteAddr)
	if !ok {
		host, _, err := net.SplitHostPort(remoteAddr)
		if err != nil {
			return remoteAddr
		}
		return host
	}
	bits := 64
	if ip.Is4() {
		bits = ipv4Bits
		if bits <= 0 || bits > 32 {
			bits = 32
		}
	}
	prefix, _ := ip.Prefix(bits) // bits is within the address's length
	return prefix.String()
}
