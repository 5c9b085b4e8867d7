// Package kratos makes Muster a Kratos registry: Registry implements
// Kratos's registry.Registrar and registry.Discovery over any Muster
// Registrar and Discovery, so that a Kratos app switches registry in one
// line (kratos.Registrar(reg) on the server, grpc.WithDiscovery(reg) on
// the client). It is its own Go module so that the main module's users
// never download Kratos.
//
// A Kratos instance is registered under its name and ID with the address of
// its first grpc:// endpoint, its version and metadata; its other
// endpoints (http://) are not carried, since a Muster instance has one
// address. Discovery hands Kratos each instance with one endpoint,
// "grpc://<addr>?isSecure=false".
//
// Registry is safe for concurrent use.
package kratos
