// Package lb is the infrastructure Muster's balancers share: Base (grpc-go's
// endpointsharding with a pick_first child per endpoint, per-endpoint state
// kept across pickers, weights from the Muster resolver or the config's
// EndpointWeights table), outlier ejection (Detector, OutlierState,
// OutlierConfig and its JSON parsing), the
// classification of a call's outcome (Sent, Failed), routing by color and
// canary share (ColorConfig and its JSON parsing, NewRoutePicker; see
// package color and docs/RELEASES.md), config parsing helpers, and the
// monotonic clock.
//
// Pickers read OutlierState with atomic loads only; the Detector's mutex is
// taken only when an ejection starts or ends. Base's methods follow the
// balancer.Balancer contract: gRPC serialises them, and Base locks against
// its children's concurrent state updates.
package lb
