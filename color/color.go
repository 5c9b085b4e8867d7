package color

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Header is the gRPC metadata key that carries a call's color.
const Header = "x-muster-color"

// KeyHeader is the gRPC metadata key that carries a call's canary key
// (see WithKey).
const KeyHeader = "x-muster-key"

// DefaultInstanceKey is the metadata key of a registry.Instance that holds
// the instance's color, unless a balancer config names another.
const DefaultInstanceKey = "color"

// ctxKey is the context key of the color WithColor set.
type ctxKey struct{}

// keyKey is the context key of the canary key WithKey set.
type keyKey struct{}

// WithColor returns a copy of ctx whose outgoing calls carry color c: the
// outgoing metadata gets the Header entry c, replacing any color already
// there. An empty c makes the calls uncolored (the Header entry is
// removed). It copies the outgoing metadata; call it once per request, not
// per pick.
func WithColor(ctx context.Context, c string) context.Context {
	return withHeader(ctx, Header, c, ctxKey{})
}

// WithKey returns a copy of ctx whose outgoing calls carry the canary key
// k (header KeyHeader), such as a user ID: an uncolored call's share of a
// canary (registry.Canary) is then decided by a hash of k instead of at
// random, so every call with the same key lands on the same version, at
// every hop that has the same share (the server interceptors carry the key
// on like the color). An empty k removes it. Like WithColor it copies the
// outgoing metadata.
func WithKey(ctx context.Context, k string) context.Context {
	return withHeader(ctx, KeyHeader, k, keyKey{})
}

// withHeader sets (or, for "", removes) one outgoing metadata entry and
// keeps its value under ctxKey for reads that do not allocate.
func withHeader(ctx context.Context, header, v string, ctxKey any) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx) // a copy, ours to change
	if md == nil {
		md = metadata.MD{}
	}
	if v == "" {
		delete(md, header)
	} else {
		md.Set(header, v)
	}
	return context.WithValue(metadata.NewOutgoingContext(ctx, md), ctxKey, v)
}

// FromContext returns the color of the calls made with ctx, "" for
// uncolored calls: the color WithColor set, else the last Header value of
// the outgoing metadata (set by other means, such as
// metadata.AppendToOutgoingContext). It does not allocate when the color
// was set by WithColor or is absent; reading a Header entry set by other
// means copies it (one small allocation). A nil ctx is uncolored.
func FromContext(ctx context.Context) string { return outgoing(ctx, Header, ctxKey{}) }

// KeyFromContext returns the canary key of the calls made with ctx, ""
// for none, as FromContext returns their color (and with the same
// allocation behaviour).
func KeyFromContext(ctx context.Context) string { return outgoing(ctx, KeyHeader, keyKey{}) }

// KeyFromContextHeader is KeyFromContext for a key carried in another
// request header (a service call policy's affinityHeader, such as
// "x-user"): the key color.WithKey set, else the last outgoing value of
// header.
func KeyFromContextHeader(ctx context.Context, header string) string {
	return outgoing(ctx, header, keyKey{})
}

// outgoing reads the value set under ctxKey, else the last outgoing
// metadata value of header.
func outgoing(ctx context.Context, header string, ctxKey any) string {
	if ctx == nil {
		return ""
	}
	if v, ok := ctx.Value(ctxKey).(string); ok {
		return v
	}
	if v := metadata.ValueFromOutgoingContext(ctx, header); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// FromIncomingContext returns the color of the call a server handles, ""
// when it is uncolored: the last Header value of the incoming metadata.
func FromIncomingContext(ctx context.Context) string { return incoming(ctx, Header) }

// KeyFromIncomingContext returns the canary key of the call a server
// handles, "" for none.
func KeyFromIncomingContext(ctx context.Context) string { return incoming(ctx, KeyHeader) }

func incoming(ctx context.Context, header string) string {
	if v := metadata.ValueFromIncomingContext(ctx, header); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}
