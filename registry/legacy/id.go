package legacy

import (
	"fmt"
	"strings"
)

// instanceID turns the last part of a legacy key into a valid instance ID:
// '%', '/', spaces and bytes outside printable ASCII are percent-escaped,
// so distinct suffixes give distinct IDs. A suffix whose ID is longer than
// registry.MaxIDLen is bad (Validate says so).
func instanceID(suffix string) string {
	if !needsEscape(suffix) {
		return suffix
	}
	var b strings.Builder
	for i := 0; i < len(suffix); i++ {
		c := suffix[i]
		if escaped(c) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if escaped(s[i]) {
			return true
		}
	}
	return false
}

func escaped(c byte) bool { return c <= ' ' || c >= 0x7f || c == '/' || c == '%' }
