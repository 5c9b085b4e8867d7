package embedetcd

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/auth"
)

// keepAuth makes the server's authentication agree with password, as
// Config.RootPassword says. It talks to the server in process, not over a
// connection: the steps that turn authentication on run while it is off,
// so they need no credentials and no TLS.
func (s *Server) keepAuth(ctx context.Context, password string) error {
	srv := s.etcd.Server
	if srv.AuthStore().IsAuthEnabled() {
		if password == "" {
			return fmt.Errorf("%w: the data directory's etcd has authentication on, and no root password was given", ErrAuth)
		}
		if _, err := srv.AuthStore().CheckPassword(RootUser, password); err != nil {
			return fmt.Errorf("%w: the data directory's etcd refuses the root password: %v", ErrAuth, err)
		}
		return nil
	}
	if password == "" {
		return nil
	}
	// Each step may have run already, in a start that stopped before
	// authentication was on: a user root that exists gets this password.
	_, err := srv.UserAdd(ctx, &pb.AuthUserAddRequest{Name: RootUser, Password: password})
	if errors.Is(err, auth.ErrUserAlreadyExist) {
		_, err = srv.UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: RootUser, Password: password})
	}
	if err != nil {
		return fmt.Errorf("%w: add user root: %v", ErrAuth, err)
	}
	if _, err := srv.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: RootUser}); err != nil && !errors.Is(err, auth.ErrRoleAlreadyExist) {
		return fmt.Errorf("%w: add role root: %v", ErrAuth, err)
	}
	if _, err := srv.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: RootUser, Role: RootUser}); err != nil {
		return fmt.Errorf("%w: grant role root to user root: %v", ErrAuth, err)
	}
	if _, err := srv.AuthEnable(ctx, &pb.AuthEnableRequest{}); err != nil {
		return fmt.Errorf("%w: turn authentication on: %v", ErrAuth, err)
	}
	return nil
}
