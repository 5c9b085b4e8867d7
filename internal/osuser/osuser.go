// Package osuser names the local user a process runs as, in a form fit to
// be recorded as who made a change: printable UTF-8 of at most 128 bytes.
package osuser

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"unicode"
)

// maxLen bounds the name, in bytes.
const maxLen = 128

// Name returns the name of the process's OS user (os/user), else $USER,
// else "uid N"; unprintable characters become '?', and a longer name is
// cut to 128 bytes.
func Name() string {
	name := ""
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if name = os.Getenv("USER"); name == "" {
		name = "uid " + strconv.Itoa(os.Getuid())
	}
	return Clean(name)
}

// Clean returns name printable and at most 128 bytes long: unprintable
// characters and invalid UTF-8 become '?'.
func Clean(name string) string {
	name = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(name, "?"))
	if len(name) > maxLen {
		name = strings.ToValidUTF8(name[:maxLen], "")
	}
	return name
}
