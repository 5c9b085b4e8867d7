package server

import (
	"fmt"
	"net"
)

// advertise returns the address clients should dial for a server listening
// on listenAddr. An explicit address wins. A listener bound to a specific
// host is advertised as it is. A wildcard host (0.0.0.0, ::, or none) is
// replaced by the first routable address of the machine: a global unicast
// IPv4 address of an interface that is up and not a loopback, else such an
// IPv6 address, else 127.0.0.1 (a machine with no network). In a container
// or behind NAT, set the instance's Addr explicitly instead.
func advertise(explicit string, listenAddr net.Addr) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(listenAddr.String())
	if err != nil {
		return "", fmt.Errorf("server: listener address %q: %w", listenAddr, err)
	}
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return net.JoinHostPort(host, port), nil
	}
	return net.JoinHostPort(routableIP(interfaceAddrs()), port), nil
}

// interfaceAddrs lists the addresses of interfaces that are up and not
// loopbacks.
func interfaceAddrs() []net.IP {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ips = append(ips, n.IP)
			}
		}
	}
	return ips
}

// routableIP picks the first global unicast IPv4 address, else the first
// global unicast IPv6 address, else 127.0.0.1.
func routableIP(ips []net.IP) string {
	for _, ip := range ips {
		if ip.To4() != nil && ip.IsGlobalUnicast() {
			return ip.String()
		}
	}
	for _, ip := range ips {
		if ip.To4() == nil && ip.IsGlobalUnicast() {
			return ip.String()
		}
	}
	return "127.0.0.1"
}
