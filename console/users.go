package console

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/crypto/bcrypt"
)

// maxUserName bounds a user name of WithAdminUsers.
const maxUserName = 64

// minBcryptCost is the least bcrypt cost a password hash should have: at
// cost 5 (what htpasswd -B writes without -C) a guesser checks hundreds of
// passwords a second over many addresses, at 10 a few.
const minBcryptCost = 10

// weak returns the users whose password hash has a bcrypt cost below
// minBcryptCost, sorted, each with its cost.
func (u users) weak() []string {
	var out []string
	for name, hash := range u {
		if c, err := bcrypt.Cost(hash); err == nil && c < minBcryptCost {
			out = append(out, fmt.Sprintf("%s (cost %d)", name, c))
		}
	}
	slices.Sort(out)
	return out
}

// weakHashes is the error logged for password hashes of a bcrypt cost
// below minBcryptCost.
const weakHashes = "console: password hashes of a bcrypt cost below 10: a guesser with many addresses checks hundreds of " +
	"passwords a second against them; hash them again with htpasswd -B -C 12"

// users are the operators who may log in with a password: the bcrypt hash
// of each one's password, by user name.
type users map[string][]byte

// ValidateAdminUsers returns the error WithAdminUsers(htpasswd) would make
// New fail with, or nil: for callers that check a file before building a
// Server.
func ValidateAdminUsers(htpasswd string) error {
	if _, err := parseUsers(htpasswd); err != nil {
		return fmt.Errorf("console: WithAdminUsers: %w", err)
	}
	return nil
}

// parseUsers reads htpasswd lines "user:hash" where hash is a bcrypt hash
// (htpasswd -B); blank lines and lines starting with # are skipped.
func parseUsers(text string) (users, error) {
	u := users{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want user:bcrypt-hash", i+1)
		case !validUserName(name):
			return nil, fmt.Errorf("line %d: user name %q: want 1 to %d printable characters without spaces", i+1, name, maxUserName)
		case u[name] != nil:
			return nil, fmt.Errorf("line %d: user %q listed twice", i+1, name)
		}
		// bcrypt's error is left out: it quotes the text, which may be
		// a plain password.
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("line %d: user %q: the password must be a bcrypt hash (htpasswd -B)", i+1, name)
		}
		u[name] = []byte(hash)
	}
	if len(u) == 0 {
		return nil, errors.New("no user")
	}
	return u, nil
}

func validUserName(name string) bool {
	if name == "" || len(name) > maxUserName {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// check reports whether password is user's. An unknown user takes about as
// long as a wrong password, so that timing does not tell which users
// exist.
func (u users) check(user, password string) bool {
	hash, known := u[user]
	if !known {
		for _, h := range u {
			hash = h
			break
		}
	}
	if hash == nil {
		return false
	}
	ok := bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil
	return ok && known
}
