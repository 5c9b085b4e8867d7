package main

import (
	"github.com/spf13/cobra"

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
// own, or a framework's a service is migrating from.
type layoutFlags struct {
	layout     string
	legacyName string
	namespace  string
}

func (f *layoutFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.layout, "layout", layoutMuster,
		"key layout to read the service in: muster, go-zero, kratos or etcd-naming (see docs/MIGRATION.md)")
	cmd.Flags().StringVar(&f.legacyName, "legacy-name", "",
		"the service's name in --layout: go-zero's Etcd.Key, Kratos's service name, etcd naming's target (default: the service name)")
	cmd.Flags().StringVar(&f.namespace, "kratos-namespace", legacy.DefaultKratosNamespace, "Kratos's key prefix, with --layout kratos")
}

// options returns the Discovery options reading service in the selected
// layout: none for Muster's.
func (f *layoutFlags) options(service string) ([]etcd.Option, error) {
	var opts []legacy.Option
	if f.legacyName != "" {
		opts = append(opts, legacy.WithName(service, f.legacyName))
	}
	var l etcd.Layout
	var err error
	switch f.layout {
	case layoutMuster:
		if f.legacyName != "" {
			return nil, usageErrorf("--legacy-name needs --layout go-zero, kratos or etcd-naming")
		}
		return nil, nil
	case layoutGoZero:
		l, err = legacy.NewGoZero(opts...)
	case layoutKratos:
		l, err = legacy.NewKratos(append(opts, legacy.WithKratosNamespace(f.namespace))...)
	case layoutNaming:
		l, err = legacy.NewNaming(opts...)
	default:
		return nil, usageErrorf("--layout %q: want muster, go-zero, kratos or etcd-naming", f.layout)
	}
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return []etcd.Option{etcd.WithLayout(l)}, nil
}
