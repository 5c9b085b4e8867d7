package admission

import (
	"net"

	"google.golang.org/grpc/credentials"
)

// Credentials returns creds establishing each connection of a
// NewTLSListener when its server-side handshake succeeds (the client's
// certificate verified, where creds require one): ServerHandshake then
// moves the connection from its handshake's place to a connection's
// (Establish), and fails, closing it, when the connection pool refuses it.
func Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return establishing{creds}
}

type establishing struct {
	credentials.TransportCredentials
}

var _ credentials.TransportCredentials = establishing{}

// ServerHandshake does creds's handshake, then establishes rawConn.
func (e establishing) ServerHandshake(rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := e.TransportCredentials.ServerHandshake(rawConn)
	if err != nil {
		return nil, nil, err
	}
	if err := Establish(rawConn); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, info, nil
}

// Clone returns a copy establishing its connections too.
func (e establishing) Clone() credentials.TransportCredentials {
	return establishing{e.TransportCredentials.Clone()}
}
