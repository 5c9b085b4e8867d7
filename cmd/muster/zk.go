package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// zkScheme starts a --registry value naming ZooKeeper servers.
const zkScheme = "zk://"

// addRegistryFlag adds --registry to cmd. A command that works on the
// Store the flags name (onStore) opens ZooKeeper's when the flag names
// ZooKeeper servers (session's open); the others work on etcd only and
// refuse it. A command that runs nothing itself (only its subcommands do)
// gets no flag.
func (g *globalOptions) addRegistryFlag(cmd *cobra.Command, onStore bool) {
	if cmd.RunE == nil {
		return
	}
	usage := "the registry: zk://host:port,host:port for ZooKeeper; empty for etcd at --endpoints ($MUSTER_REGISTRY)"
	if !onStore {
		usage = "the registry: empty for etcd at --endpoints, the only one this command works on ($MUSTER_REGISTRY)"
	}
	cmd.Flags().StringVar(&g.registry, "registry", "", usage)
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		servers, err := g.zkServers()
		if err != nil {
			return err
		}
		if servers != nil && !onStore {
			return usageErrorf("--registry %s: %s works on etcd only", g.registry, cmd.Name())
		}
		return run(cmd, args)
	}
}

// zkServers returns the ZooKeeper servers --registry names, nil for etcd.
func (g *globalOptions) zkServers() ([]string, error) {
	if g.registry == "" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(g.registry, zkScheme)
	if !ok {
		return nil, usageErrorf("--registry %q: want zk://host:port[,host:port...]", g.registry)
	}
	var servers []string
	for _, s := range strings.Split(rest, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, ":") || strings.Contains(s, "/") {
			return nil, usageErrorf("--registry %q: server %q is not host:port", g.registry, s)
		}
		servers = append(servers, s)
	}
	if len(servers) == 0 {
		return nil, usageErrorf("--registry %q: no server", g.registry)
	}
	return servers, nil
}
