package p2c

// Exported for the external tests (suite_test.go).
var (
	InPicker = inPicker
	WaitFor  = waitFor
)

// CaptureName is the name of the balancer that records the muster_p2c
// balancers and pickers gRPC builds.
func CaptureName() string { return capture.Name() }
