package proctest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports picks distinct free TCP ports for servers that must keep their
// ports across a restart (an etcd member's peer URL, a ZooKeeper
// ensemble's quorum ports).
//
// The ports are taken below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range on Linux): the kernel hands ports of that
// range to every outgoing connection and every listener on port 0, so a
// port from it that is free while its server restarts can be taken by any
// connection on the machine meanwhile. Below it, only another test picking
// ports the same way, or binding a fixed port, can take one. Where the
// range cannot be read (or 64 random ports below it are all taken), ports
// come from the kernel (port 0).
//
// Each picked port stays bound until Release, so the ports of one Ports
// are distinct. The zero value is ready to use.
type Ports struct {
	lns []net.Listener
}

// The range Pick draws from when the ephemeral range can be read: from
// lowestPort up to the range's first port, at least minSpan ports.
const (
	lowestPort = 10000
	minSpan    = 1000
)

// Pick reserves a free port on host ("127.0.0.1", or "" for all
// interfaces) and returns it.
func (p *Ports) Pick(host string) (int, error) {
	if lo, hi, ok := pickRange(); ok {
		for range 64 {
			port := lo + rand.IntN(hi-lo)
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				continue // in use: try another
			}
			p.lns = append(p.lns, ln)
			return port, nil
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("proctest: reserve a free port on %q: %w", host, err)
	}
	p.lns = append(p.lns, ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Release frees the picked ports for their servers to bind.
func (p *Ports) Release() {
	for _, ln := range p.lns {
		_ = ln.Close()
	}
	p.lns = nil
}

// pickRange is the range [lo, hi) Pick draws from: below the ephemeral
// range, if that can be read and leaves room.
func pickRange() (lo, hi int, ok bool) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	first, err := parsePortRange(string(data))
	if err != nil || first-lowestPort < minSpan {
		return 0, 0, false
	}
	return lowestPort, first, true
}

// parsePortRange returns the first port of an ip_local_port_range value
// ("32768\t60999\n").
func parsePortRange(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, errors.New("want two ports")
	}
	first, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, err
	}
	if first < 1 || first > 65535 {
		return 0, fmt.Errorf("port %d out of range", first)
	}
	return first, nil
}
