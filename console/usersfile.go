package console

import (
	"fmt"
	"os"
	"time"

	"github.com/musterhq/muster/internal/reload"
)

// usersCheckEvery is how often, at most, the console looks whether
// WithAdminUsersFile's file changed: a user removed from it loses its
// sessions within that time of its next request.
const usersCheckEvery = time.Second

// usersFile is WithAdminUsersFile's htpasswd file, looked at on the
// requests that use the users (a login, a session), at most once every
// usersCheckEvery, and read again when it changed.
type usersFile struct {
	path string
	src  *reload.Source[users]
}

// readUsersFile reads and parses the htpasswd file at path.
func readUsersFile(path string) (*usersFile, users, error) {
	src, err := reload.New(func() (users, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		u, err := parseUsers(string(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return u, nil
	}, usersCheckEvery, path)
	if err != nil {
		return nil, nil, err
	}
	return &usersFile{path: path, src: src}, src.Current(), nil
}

// changed returns the file's users when it changed since it was last
// read; an error when the changed file cannot be read or parsed (the
// caller keeps the users it has; the file is read again at its next
// change).
func (f *usersFile) changed(now time.Time) (users, bool, error) {
	return f.src.Get(now)
}
