// Package lb is the infrastructure Muster's balancers share: Base (grpc-go's
// endpointsharding with a pick_first child per endpoint, per-endpoint state
// kept across pickers, weights from the Muster resolver or the config's
// EndpointWeights table), outlier ejection (Detector, OutlierState,
// OutlierConfig), the classification of a call's outcome (Classify:
// NotSent, Success, Failure, Canceled) and ChainDone, routing by color and
// canary share (ColorConfig, NewRoutePicker; see package color and
// docs/RELEASES.md), locality levels (LocalityConfig, Spill), slow start
// (SlowStartConfig), the config every policy shares (Config: ParseConfig
// with each part's parser, ConfigOf, DecodeStrict, ParseDuration), and the
// monotonic clock. What the shared mechanisms promise users is written
// once, in docs/BALANCERS.md, which both policies' package docs link to.
//
// Pickers read OutlierState with atomic loads only; the Detector's mutex is
// taken only when an ejection starts or ends. Base's methods follow the
// balancer.Balancer contract: gRPC serialises them, and Base locks against
// its children's concurrent state updates.
package lb
