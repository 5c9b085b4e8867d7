// Package usersvc implements the example user service: a fixed table of
// users, and the address of the instance that answered in every reply.
package usersvc

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/examples/user/userpb"
)

var users = map[string]string{
	"1": "Ada Lovelace",
	"2": "Grace Hopper",
	"3": "Barbara Liskov",
}

// Service implements userpb.UserServer.
type Service struct {
	userpb.UnimplementedUserServer
	// Addr returns the address this instance is registered under.
	Addr func() string
}

// Get returns the user with the given id, or NotFound.
func (s *Service) Get(_ context.Context, req *userpb.GetRequest) (*userpb.GetReply, error) {
	name, ok := users[req.GetId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no user %q", req.GetId())
	}
	return &userpb.GetReply{Id: req.GetId(), Name: name, ServedBy: s.Addr()}, nil
}
