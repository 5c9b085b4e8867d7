//go:build !linux

package admission

import "net"

// readyReader is empty where reads on readiness are not implemented: gRPC
// reads such a connection through its own buffer.
type readyReader struct{}

func newReadyReader(net.Conn) readyReader { return readyReader{} }
