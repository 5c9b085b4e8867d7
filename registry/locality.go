package registry

// Nearness says how near an instance runs to a client, by their regions
// and zones. Muster's balancers and its xDS control plane order instances
// by it: the client's zone first, then the other zones of its region, then
// everything else.
type Nearness int

// The levels of Nearness, nearest first.
const (
	// SameZone: the instance's zone is the client's (the same name, and
	// the same region when both name one).
	SameZone Nearness = iota
	// SameRegion: another zone of the client's region.
	SameRegion
	// Elsewhere: any other instance, among them those without a region
	// when the client's zone is not theirs.
	Elsewhere
)

// Near returns how near an instance in region and zone is to a client in
// clientRegion and clientZone. Empty means unknown: a zone matches only a
// client that names one, and a region a client that names one; an instance
// or a client without a region matches any region for its zone, so that
// zones keep working while regions are being introduced.
func Near(clientRegion, clientZone, region, zone string) Nearness {
	switch {
	case clientZone != "" && zone == clientZone && (region == "" || clientRegion == "" || region == clientRegion):
		return SameZone
	case clientRegion != "" && region == clientRegion:
		return SameRegion
	}
	return Elsewhere
}
