package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// Layouts ls can read besides Muster's own (--layout).
const (
	layoutMuster = "muster"
	layoutGoZero = "go-zero"
	layoutKratos = "kratos"
	layoutNaming = "etcd-naming"
)

// layoutFlags select the key layout a command reads a service in: Muster's
// own, or a framework's a service is migrating from (--layout); or
// Muster's merged with legacy sources (--legacy).
type layoutFlags struct {
	layout     string
	legacyName string
	namespace  string
	// legacy are the --legacy values: [service=]layout[:name].
	legacy []string
	// flag is the name of the --legacy flag, for messages.
	flag string
	// read is the layout options made for --layout; nil for Muster's.
	read etcd.Layout
}

// add adds --layout, --legacy-name and the flags of addLegacy.
func (f *layoutFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.layout, "layout", layoutMuster,
		"key layout to read the service in: muster, go-zero, kratos or etcd-naming (see docs/MIGRATION.md)")
	cmd.Flags().StringVar(&f.legacyName, "legacy-name", "",
		"the service's name in --layout: go-zero's Etcd.Key, Kratos's service name, etcd naming's target (default: the service name)")
	f.addLegacy(cmd, "")
}

// addLegacy adds --legacy and --kratos-namespace, their names starting
// with prefix.
func (f *layoutFlags) addLegacy(cmd *cobra.Command, prefix string) {
	f.flag = "--" + prefix + "legacy"
	cmd.Flags().StringArrayVar(&f.legacy, prefix+"legacy", nil,
		"merge a legacy source with Muster's registry, as clients' merged Discovery does: [SERVICE=]LAYOUT[:NAME], LAYOUT go-zero, kratos or etcd-naming, "+
			"NAME the service's name there (default: its Muster name); repeat it for more (see docs/MIGRATION.md)")
	cmd.Flags().StringVar(&f.namespace, prefix+"kratos-namespace", legacy.DefaultKratosNamespace, "Kratos's key prefix, for kratos sources")
}

// onEtcd refuses --layout and --legacy with a registry other than etcd
// (--registry): the layouts they read are etcd's.
func (f *layoutFlags) onEtcd(g *globalOptions) error {
	switch {
	case g.registry == "":
		return nil
	case f.layout != layoutMuster:
		return usageErrorf("--layout: not with --registry %s", g.registry)
	case len(f.legacy) > 0:
		return usageErrorf("%s: not with --registry %s", f.flag, g.registry)
	}
	return nil
}

// options returns the Discovery options reading service in the selected
// layout: none for Muster's.
func (f *layoutFlags) options(service string) ([]etcd.DiscoveryOption, error) {
	if f.layout != layoutMuster && service == "" {
		example := "muster ls user --layout " + f.layout
		if f.legacyName != "" {
			example += " --legacy-name " + f.legacyName
		}
		return nil, usageErrorf("--layout %s reads one service: name it (its Muster name), as in: %s", f.layout, example)
	}
	var opts []legacy.Option
	if f.legacyName != "" {
		opts = append(opts, legacy.WithName(service, f.legacyName))
	}
	if f.layout != layoutMuster && len(f.legacy) > 0 {
		return nil, usageErrorf("--legacy merges legacy sources with Muster's layout: it does not go with --layout %s", f.layout)
	}
	if f.layout == layoutMuster {
		if f.legacyName != "" {
			return nil, usageErrorf("--legacy-name needs --layout go-zero, kratos or etcd-naming")
		}
		return nil, nil
	}
	l, err := f.newLayout(f.layout, opts...)
	if err != nil {
		return nil, err
	}
	f.read = l
	return []etcd.DiscoveryOption{etcd.WithLayout(l)}, nil
}

// newLayout returns the legacy layout named name (a --layout or --legacy
// value) with opts.
func (f *layoutFlags) newLayout(name string, opts ...legacy.Option) (etcd.Layout, error) {
	var l etcd.Layout
	var err error
	switch name {
	case layoutGoZero:
		l, err = legacy.NewGoZero(opts...)
	case layoutKratos:
		l, err = legacy.NewKratos(append(opts, legacy.WithKratosNamespace(f.namespace))...)
	case layoutNaming:
		l, err = legacy.NewNaming(opts...)
	default:
		return nil, usageErrorf("layout %q: want go-zero, kratos or etcd-naming", name)
	}
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return l, nil
}

// legacySource is one --legacy value, parsed: a legacy layout merged with
// Muster's registry for one service (or for every service, by its Muster
// name, when service is empty).
type legacySource struct {
	service string // "": every service
	layout  etcd.Layout
	kind    string // the layout's name: go-zero, kratos or etcd-naming
	named   bool   // the value gave the service's name there (:NAME)
}

// sources parses --legacy for a command that reads service ("": any
// service, as the console and ls without a service do). A value naming
// another service is an error, as is a NAME without a service to map it
// from. Without --legacy it returns nil.
func (f *layoutFlags) sources(service string) ([]legacySource, error) {
	out := make([]legacySource, 0, len(f.legacy))
	for _, v := range f.legacy {
		svc, kind, name := parseLegacy(v)
		if svc == "" {
			svc = service
		}
		switch {
		case svc != "" && registry.ValidateName(svc) != nil:
			return nil, usageErrorf("%s %q: %v", f.flag, v, registry.ValidateName(svc))
		case service != "" && svc != service:
			return nil, usageErrorf("%s %q names service %s; this command reads %s", f.flag, v, svc, service)
		case svc == "" && name != "":
			return nil, usageErrorf("%s %q: name the service whose name this is, as in SERVICE=%s", f.flag, v, v)
		}
		var opts []legacy.Option
		if name != "" {
			opts = append(opts, legacy.WithName(svc, name))
		}
		l, err := f.newLayout(kind, opts...)
		if err != nil {
			return nil, usageErrorf("%s %q: %v", f.flag, v, err)
		}
		out = append(out, legacySource{service: svc, layout: l, kind: kind, named: name != ""})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// parseLegacy splits a --legacy value [service=]layout[:name].
func parseLegacy(v string) (service, layout, name string) {
	layout = v
	if i := strings.IndexAny(v, "=:"); i >= 0 && v[i] == '=' {
		service, layout = v[:i], v[i+1:]
	}
	layout, name, _ = strings.Cut(layout, ":")
	return service, layout, name
}

// mergeLegacy makes the session read services through a legacy.Merged
// Discovery of Muster's registry and srcs, each read by a Discovery of its
// own with the session's options and opts. Without srcs it does nothing.
// The legacy layouts are etcd's (onEtcd).
func (s *session) mergeLegacy(srcs []legacySource, opts ...etcd.DiscoveryOption) error {
	if len(srcs) == 0 {
		return nil
	}
	parts := make([]legacy.Source, 0, len(srcs))
	for _, src := range srcs {
		d, err := etcd.NewDiscovery(s.cli, append(append(s.opts[:len(s.opts):len(s.opts)], opts...), etcd.WithLayout(src.layout))...)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, d.Close)
		part := legacy.Source{Name: src.kind, Discovery: d}
		if src.service != "" {
			part.Services = []string{src.service}
		}
		parts = append(parts, part)
	}
	m, err := legacy.NewMerged(s.store.Discovery(), parts...)
	if err != nil {
		return err
	}
	// Closed before the parts (closers run in reverse order).
	s.closers = append(s.closers, m.Close)
	s.view, s.merged = m, true
	return nil
}

// consoleOptions are the console options merging the --legacy sources.
func (f *layoutFlags) consoleOptions() ([]console.Option, error) {
	srcs, err := f.sources("")
	if err != nil {
		return nil, err
	}
	opts := make([]console.Option, 0, len(srcs))
	for _, src := range srcs {
		var services []string
		if src.service != "" {
			services = []string{src.service}
		}
		opts = append(opts, console.WithLegacy(src.kind, src.layout, services...))
	}
	return opts, nil
}

// goZeroKeyHint returns the line that tells why a go-zero layout read
// without the service's name there (go-zero's Etcd.Key) found nothing: it
// read the keys under the service's Muster name, and go-zero servers
// register under their Etcd.Key, which is seldom that. how shows the flag
// that gives the key, with %s for it.
func goZeroKeyHint(service string, l etcd.Layout, how string) string {
	key := service + ".rpc"
	return fmt.Sprintf("no go-zero instance under the key prefix %q (the service's Muster name): go-zero servers register under "+
		"their Etcd.Key (RpcServerConf.Etcd.Key, such as %s); give it: "+how, l.Prefix(service), key, key)
}

// legacyHints returns, for ls and watch of service, a line per go-zero
// layout read without its key that found no instance in snap: the
// --layout one (legacyName "" and no instance at all) or a --legacy one
// (no instance from that source).
func (f *layoutFlags) legacyHints(service string, srcs []legacySource, snap registry.Snapshot) []string {
	var out []string
	if f.layout == layoutGoZero && f.legacyName == "" && f.read != nil && len(snap.Instances) == 0 {
		out = append(out, goZeroKeyHint(service, f.read, "--legacy-name %s"))
	}
	for _, src := range srcs {
		if src.kind != layoutGoZero || src.named {
			continue
		}
		found := false
		for _, in := range snap.Instances {
			found = found || legacy.SourceOf(in) == layoutGoZero
		}
		if !found {
			out = append(out, f.flag+" go-zero: "+goZeroKeyHint(service, src.layout, f.flag+" go-zero:%s"))
		}
	}
	return out
}
