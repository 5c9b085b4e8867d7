package color

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Header is the gRPC metadata key that carries a call's color.
const Header = "x-muster-color"

// DefaultInstanceKey is the metadata key of a registry.Instance that holds
// the instance's color, unless a balancer config names another.
const DefaultInstanceKey = "color"

// ctxKey is the context key of the color WithColor set.
type ctxKey struct{}

// WithColor returns a copy of ctx whose outgoing calls carry color c: the
// outgoing metadata gets the Header entry c, replacing any color already
// there. An empty c makes the calls uncolored (the Header entry is
// removed). It copies the outgoing metadata; call it once per request, not
// per pick.
func WithColor(ctx context.Context, c string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx) // a copy, ours to change
	if md == nil {
		md = metadata.MD{}
	}
	if c == "" {
		delete(md, Header)
	} else {
		md.Set(Header, c)
	}
	return context.WithValue(metadata.NewOutgoingContext(ctx, md), ctxKey{}, c)
}

// FromContext returns the color of the calls made with ctx, "" for
// uncolored calls: the color WithColor set, else the last Header value of
// the outgoing metadata (set by other means, such as
// metadata.AppendToOutgoingContext). It does not allocate when the color
// was set by WithColor or is absent; reading a Header entry set by other
// means copies it (one small allocation). A nil ctx is uncolored.
func FromContext(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	if c, ok := ctx.Value(ctxKey{}).(string); ok {
		return c
	}
	if v := metadata.ValueFromOutgoingContext(ctx, Header); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// FromIncomingContext returns the color of the call a server handles, ""
// when it is uncolored: the last Header value of the incoming metadata.
func FromIncomingContext(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, Header); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}
