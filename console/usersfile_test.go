package console_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/console"
)

// sessionUser returns the user c's session is logged in as, "" when none.
func (c *client) sessionUser() string {
	c.t.Helper()
	resp, err := c.http.Get(c.url + "api/session")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		LoggedIn bool   `json:"loggedIn"`
		User     string `json:"user"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		c.t.Fatal(err)
	}
	if !info.LoggedIn {
		return ""
	}
	return info.User
}

// The users file is read again when it changes: a user removed from it
// loses its session within a second or so of its next request, a user
// whose password changed too, a user added may log in, the others keep
// theirs; a changed file that cannot be parsed is logged and the users
// read before are kept. Without the reading again alice keeps her session
// and carol is refused.
func TestUsersFileReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users")
	write := func(text string) {
		// A file of its own renamed over the old one, as editors and
		// configuration tools write.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	// Each line made once: a hash made again has another salt, which
	// reads as a changed password.
	alice0, bob0, dave0 := htpasswd(t, "alice", "correct horse"), htpasswd(t, "bob", "battery staple"), htpasswd(t, "dave", "old password")
	write(alice0 + bob0 + dave0)
	f := newFixture(t, console.WithAdminUsersFile(path))
	logs := f.log
	alice, bob, dave := newClient(t, f.url), newClient(t, f.url), newClient(t, f.url)
	alice.loginAs("alice", "correct horse")
	bob.loginAs("bob", "battery staple")
	dave.loginAs("dave", "old password")

	write(bob0 + htpasswd(t, "carol", "staple battery", "dave", "new password"))
	deadline := time.Now().Add(10 * time.Second)
	for alice.sessionUser() != "" || dave.sessionUser() != "" {
		if time.Now().After(deadline) {
			t.Fatalf("alice (removed) and dave (new password) still logged in 10 s after the file changed; log:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond) // the file is looked at on requests: no event to await
	}
	if u := bob.sessionUser(); u != "bob" {
		t.Errorf("bob, still in the file: session of %q, want bob's", u)
	}
	carol := newClient(t, f.url)
	carol.loginAs("carol", "staple battery")
	if code, _ := alice.post("login", map[string]string{"user": "alice", "password": "correct horse"}); code == http.StatusOK {
		t.Error("alice, removed from the file, logged in again")
	}
	if !strings.Contains(logs.String(), "users file read again") || !strings.Contains(logs.String(), "sessions_ended=2") {
		t.Errorf("the reading is not logged with the 2 sessions it ended:\n%s", logs.String())
	}

	write("carol:plain-password\n")
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "cannot be read; keeping the users read before") {
		if time.Now().After(deadline) {
			t.Fatalf("an invalid file not logged within 10 s:\n%s", logs.String())
		}
		bob.sessionUser()
		time.Sleep(100 * time.Millisecond) // as above
	}
	if u := carol.sessionUser(); u != "carol" {
		t.Errorf("carol after an invalid file: session of %q, want hers kept", u)
	}
}
