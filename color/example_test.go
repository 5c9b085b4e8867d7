package color_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/musterhq/muster/color"
)

// A gateway marks a request blue and keys it by user; every call made
// with the context carries both headers.
func ExampleWithColor() {
	ctx := color.WithColor(context.Background(), "blue")
	ctx = color.WithKey(ctx, "user-42")
	md, _ := metadata.FromOutgoingContext(ctx)
	fmt.Println(color.FromContext(ctx), md[color.Header], md[color.KeyHeader])
	// Output: blue [blue] [user-42]
}
