package registry

import (
	"slices"
	"strconv"
)

// The value codec's fast path. Every registration is encoded once and
// decoded by every Discovery that follows its service, on the path from a
// registration to the channels; encoding/json's reflection costs more there
// than the rest of that path together. appendWire and parseWire handle the
// values Marshal writes for plain strings (printable ASCII) and leave
// everything else to encoding/json, whose result they reproduce exactly:
// FuzzWireCodec checks both against it.

// appendWire appends the JSON encoding of wi, byte for byte what
// encoding/json writes for it. ok is false, and dst unusable, if a string
// would need escaping; the caller then uses encoding/json.
func appendWire(dst []byte, wi *wireInstance) (out []byte, ok bool) {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(wi.V), 10)
	if dst, ok = appendField(dst, `,"id":`, wi.ID); !ok {
		return nil, false
	}
	if dst, ok = appendField(dst, `,"name":`, wi.Name); !ok {
		return nil, false
	}
	if wi.Version != "" {
		if dst, ok = appendField(dst, `,"version":`, wi.Version); !ok {
			return nil, false
		}
	}
	if dst, ok = appendField(dst, `,"addr":`, wi.Addr); !ok {
		return nil, false
	}
	if wi.Zone != "" {
		if dst, ok = appendField(dst, `,"zone":`, wi.Zone); !ok {
			return nil, false
		}
	}
	if wi.Region != "" {
		if dst, ok = appendField(dst, `,"region":`, wi.Region); !ok {
			return nil, false
		}
	}
	if wi.Weight != nil {
		dst = append(dst, `,"weight":`...)
		dst = strconv.AppendInt(dst, int64(*wi.Weight), 10)
	}
	if len(wi.Metadata) > 0 {
		keys := make([]string, 0, len(wi.Metadata))
		for k := range wi.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json sorts map keys
		sep := `,"metadata":{`
		for _, k := range keys {
			if dst, ok = appendField(dst, sep, k); !ok {
				return nil, false
			}
			if dst, ok = appendField(dst, ":", wi.Metadata[k]); !ok {
				return nil, false
			}
			sep = ","
		}
		dst = append(dst, '}')
	}
	if wi.RegisteredAt != "" {
		if dst, ok = appendField(dst, `,"registered_at":`, wi.RegisteredAt); !ok {
			return nil, false
		}
	}
	return append(dst, '}'), true
}

// appendField appends prefix and s as a JSON string, if s needs no escaping.
func appendField(dst []byte, prefix, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if !plainOut(s[i]) {
			return dst, false
		}
	}
	dst = append(dst, prefix...)
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), true
}

// plainOut reports whether encoding/json writes c as itself: printable
// ASCII other than the quote, the backslash and the characters it escapes
// for HTML (<, >, &).
func plainOut(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// plainIn reports whether encoding/json reads c inside a string as itself,
// with no escape or UTF-8 decoding involved.
func plainIn(c byte) bool {
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
}

// wireKeys are the keys of a value in the order appendWire writes them.
var wireKeys = [...]string{"v", "id", "name", "version", "addr", "zone", "region", "weight", "metadata", "registered_at"}

// parseWire decodes data into wi, which must be zero, if data has the form
// appendWire writes: no whitespace, known keys spelled exactly, each at most
// once and in appendWire's order, plain ASCII strings, unsigned integers of
// at most nine digits. ok is false for anything else, and wi must then be
// discarded: the caller uses encoding/json, which decodes every value
// parseWire accepts to the same result.
func parseWire(data []byte, wi *wireInstance) (ok bool) {
	p := wireParser{data: data}
	if !p.byte('{') {
		return false
	}
	next := 0 // index in wireKeys of the earliest key still allowed
	for first := true; ; first = false {
		if p.peek('}') {
			p.i++
			return !first && p.i == len(p.data)
		}
		if !first && !p.byte(',') {
			return false
		}
		key, ok := p.string()
		if !ok || !p.byte(':') {
			return false
		}
		k := next
		for k < len(wireKeys) && wireKeys[k] != key {
			k++
		}
		if k == len(wireKeys) {
			return false // unknown, repeated or out of order
		}
		next = k + 1
		switch key {
		case "v":
			wi.V, ok = p.uint()
		case "id":
			wi.ID, ok = p.string()
		case "name":
			wi.Name, ok = p.string()
		case "version":
			wi.Version, ok = p.string()
		case "addr":
			wi.Addr, ok = p.string()
		case "zone":
			wi.Zone, ok = p.string()
		case "region":
			wi.Region, ok = p.string()
		case "weight":
			var w int
			w, ok = p.uint()
			wi.Weight = &w
		case "metadata":
			wi.Metadata, ok = p.stringMap()
		case "registered_at":
			wi.RegisteredAt, ok = p.string()
		}
		if !ok {
			return false
		}
	}
}

type wireParser struct {
	data []byte
	i    int
}

func (p *wireParser) peek(c byte) bool { return p.i < len(p.data) && p.data[p.i] == c }

func (p *wireParser) byte(c byte) bool {
	if !p.peek(c) {
		return false
	}
	p.i++
	return true
}

// string reads a JSON string of plain bytes.
func (p *wireParser) string() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.data) && plainIn(p.data[p.i]) {
		p.i++
	}
	s := string(p.data[start:p.i])
	return s, p.byte('"')
}

// uint reads 0 or a decimal without a leading zero, of at most nine
// digits (so that it fits any int).
func (p *wireParser) uint() (int, bool) {
	start := p.i
	n := 0
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' && p.i-start < 9 {
		n = n*10 + int(p.data[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.data[start] == '0') {
		return 0, false
	}
	// A tenth digit, a fraction or an exponent is left to encoding/json.
	if p.i < len(p.data) && (p.data[p.i] >= '0' && p.data[p.i] <= '9' || p.data[p.i] == '.' || p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		return 0, false
	}
	return n, true
}

// stringMap reads a JSON object of plain strings. A repeated key keeps its
// last value, as encoding/json does.
func (p *wireParser) stringMap() (map[string]string, bool) {
	if !p.byte('{') {
		return nil, false
	}
	m := map[string]string{}
	if p.byte('}') {
		return m, true
	}
	for {
		k, ok := p.string()
		if !ok || !p.byte(':') {
			return nil, false
		}
		v, ok := p.string()
		if !ok {
			return nil, false
		}
		m[k] = v
		if p.byte('}') {
			return m, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}
