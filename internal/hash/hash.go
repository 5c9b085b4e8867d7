// Package hash has the string hash Muster uses where a choice must depend
// on a key alone (rendezvous subsetting, call affinity, sticky canary
// draws): FNV-1a, then a finalizer that spreads its weak low bits. It
// allocates nothing and has no state.
package hash

// Offset64 is FNV-1a's 64-bit offset basis: the hash of the empty string,
// to start FNV64a from.
const Offset64 = 14695981039346656037

const prime64 = 1099511628211

// FNV64a continues an FNV-1a hash h over s.
func FNV64a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// Mix64 is MurmurHash3's 64-bit finalizer: it spreads FNV's weak low bits
// over the whole word, so hashes of similar strings are independent.
func Mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// String returns the finalized FNV-1a hash of s.
func String(s string) uint64 { return Mix64(FNV64a(Offset64, s)) }
