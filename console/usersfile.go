package console

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// usersCheckEvery is how often, at most, the console looks whether
// WithAdminUsersFile's file changed: a user removed from it loses its
// sessions within that time of its next request.
const usersCheckEvery = time.Second

// usersFile is WithAdminUsersFile's htpasswd file: read again when its
// size or modification time changes, looked at on the requests that use
// the users (a login, a session), at most once every usersCheckEvery.
type usersFile struct {
	path string

	mu      sync.Mutex // one look at a time
	checked time.Time  // the last look
	size    int64      // of the version read
	mod     time.Time  // of the version read
}

// readUsersFile reads and parses the htpasswd file at path.
func readUsersFile(path string) (*usersFile, users, error) {
	f := &usersFile{path: path}
	u, err := f.read()
	return f, u, err
}

// read reads the file and notes its size and modification time.
func (f *usersFile) read() (users, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, err
	}
	u, err := parseUsers(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	f.size, f.mod = st.Size(), st.ModTime()
	return u, nil
}

// changed returns the file's users when it changed since it was last
// read, if it was not looked at in the last usersCheckEvery; an error
// when the changed file cannot be read or parsed (the caller keeps the
// users it has; the file is read again at its next change).
func (f *usersFile) changed(now time.Time) (users, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.checked) < usersCheckEvery {
		return nil, false, nil
	}
	f.checked = now
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, false, err
	}
	if st.Size() == f.size && st.ModTime().Equal(f.mod) {
		return nil, false, nil
	}
	size, mod := st.Size(), st.ModTime()
	u, err := f.read()
	if err != nil {
		f.size, f.mod = size, mod // said once, not at every look
		return nil, false, err
	}
	return u, true, nil
}
