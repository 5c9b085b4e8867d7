// Package xds is an xDS control plane over Muster's registry: it publishes
// the instances a registry.Discovery sees to any xDS client (gRPC in Go,
// Java, C++, Python, Node; service-mesh proxies) over ADS (state of the
// world, and delta for the clients that ask for it), so that a client with
// no Muster code calls xds:///<service>.
//
// # Resources
//
// For each service S the Server publishes four resources, each named S: a
// Listener (an API listener whose HTTP connection manager takes its routes
// by RDS over ADS and ends its filter chain with the router), a
// RouteConfiguration (every host, prefix "/" to cluster S), a Cluster (EDS
// over ADS, service name S, the service's LBPolicy, RoundRobin by default; a
// CustomLBPolicy such as MusterP2C names a client balancer, with round robin
// as the fallback for clients without it; for MusterP2C and MusterWRR the
// balancer's config carries the instances' weights other than the default,
// which the balancer cannot read from the endpoints) and a
// ClusterLoadAssignment: one locality per zone, weighted by the sum of its
// instances' weights (for RingHash, one locality per priority); an endpoint
// per instance with the instance's weight, a draining instance as
// health_status DRAINING (clients send it nothing), and, with
// WithEndpointMetadata, the instance under the filter-metadata key
// MetadataKey. An instance xDS cannot carry (an address that is not
// host:port with an IP address, a duplicate of another instance's address,
// a color no client can send) is left out, logged and counted
// (Stats.Skipped); the others are published. Every resource is in a form
// that every client at Muster's support floor accepts (docs/XDS.md,
// "Clients: the support floor and the matrix"): a client without a policy falls back to round robin. Routes
// come in a form per client family where one misreads the call policy (the
// C-core gets no timeout, grpc-js-xds backoffs under 1 s), chosen by the
// node's user agent. WithSelfCheck checks each resource against the
// preconditions of the clients that get it (docs/XDS.md, "Client
// preconditions").
//
// # Colors
//
// A service with colored instances (metadata entry "color", as for Muster's
// balancers) gets a Cluster and ClusterLoadAssignment "S~<color>" per color
// (the color's instances taking calls first, the base as failover
// priorities after them), its assignment S lists the base only, and its
// route sends a call whose x-muster-color header names a color to that
// color's cluster and other calls to S; with WithCanaries, a canary share
// of the uncolored calls goes to the color by weighted clusters (per call:
// gRPC clients draw weighted clusters at random, so no stickiness per key;
// no strict mode). A service without colors is published as above. See
// docs/XDS.md, "Colors (blue-green and canary for xDS clients)".
//
// # Localities
//
// A client's region and zone are those of its bootstrap node locality; an
// instance's are its registry.Instance Region and Zone. The assignments a
// client gets have one locality per region and zone, with the client's own
// zone at priority 0, the other zones of its region next and everything
// else last; a level none of whose instances takes calls is merged into
// the next, and priorities are numbered from 0 without gaps, so a client
// without a locality, or with no instance taking calls in its zone or
// region, has every locality at priority 0. A zone matches when its name
// is the client's and the regions do not differ (an empty region matches
// any). gRPC's priority policy moves to the next priority only when one
// has no READY endpoint: it does not spill by capacity. Since the same
// resource name then has different contents per locality, each client
// locality has its own endpoint cache (at most WithMaxZones of them).
//
// # Versions
//
// Each resource has its own version (one go-control-plane LinearCache per
// type, and per client locality for endpoints): a change of one service
// sends that service's ClusterLoadAssignment to the clients watching it,
// and nothing else, but for the service's Cluster too when its policy is
// MusterP2C or MusterWRR and the change alters its weights. An assignment
// equal to the published one is not sent. A version a client rejected
// (NACK) is never sent to it again: it keeps its last accepted version
// until the next change; NACKs are logged with the client's error and
// counted. Delta (incremental) ADS streams, which gRPC
// clients do not open but Envoy may, are served from the same caches with
// the same guarantees.
//
// # Registry
//
// The Server follows each service through the served-list pipeline the
// resolver's channels use, so empty-list protection and the deletion grace
// have exactly the resolver's semantics and options (WithProtection).
// While the registry is unreachable the Discovery keeps its last lists and
// the Server keeps serving them. Services are those of
// WithServices, or every service of a Discovery implementing
// registry.ServiceLister (listed again every WithListInterval). A listed
// service that has had no instance for WithForgetAfter and is no longer
// listed (no key of it is left) is unpublished and no longer followed, and
// published again if it comes back; the services of WithServices are
// followed until Close.
//
// # Security
//
// Serve serves plaintext unless WithTLSFiles or WithTLS is given.
// WithTLSFiles names a certificate, its key and optionally the CA that
// client certificates must be signed by, and reads them again when they
// change (certificates rotate without a restart); WithTLS takes a fixed
// configuration (ServerTLS reads one from the same files, once). Register
// leaves credentials to the caller's grpc.Server.
//
// # Clients
//
// Clients lists the open ADS streams: each client's node ID and zone, when
// its stream opened, the services it subscribes to and, per resource type,
// the last version sent, the last version it accepted and its last NACK
// with the error it gave. A stream is forgotten when it closes; what a
// client sends is kept within bounds (at most 10,000 streams, 16 types per
// stream, 1,000 names per type, 1 KiB per text).
//
// A Server is safe for concurrent use; Close is idempotent. Its counters
// (Stats) are exported to Prometheus by metrics.XDS.
package xds
