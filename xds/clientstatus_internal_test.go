package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// What a client sends is kept within bounds, and a closed stream is
// forgotten.
func TestClientTableBounds(t *testing.T) {
	tb := newClientTable()
	k := streamKey{id: 1}
	now := time.Now()
	tb.open(k, now)
	names := make([]string, maxNamesPerType+10)
	for i := range names {
		names[i] = fmt.Sprint("svc", i)
	}
	long := strings.Repeat("é", maxTextBytes)
	tb.request(k, request{node: &corev3.Node{Id: long}, typeURL: "t", names: names}, now)
	for i := range maxTypesPerStream + 5 {
		tb.request(k, request{typeURL: fmt.Sprint("type", i)}, now)
	}
	tb.request(k, request{typeURL: "t", nonce: "n", nack: true, errorDetail: long, names: names}, now)
	got := tb.list()
	if len(got) != 1 {
		t.Fatalf("%d clients, want 1", len(got))
	}
	c := got[0]
	if len(c.Node) > maxTextBytes || !strings.HasPrefix(long, c.Node) || len(c.Types) != maxTypesPerStream {
		t.Errorf("node of %d bytes, %d types: want at most %d bytes of the ID and %d types", len(c.Node), len(c.Types), maxTextBytes, maxTypesPerStream)
	}
	var ts TypeStatus
	for _, x := range c.Types {
		if x.TypeURL == "t" {
			ts = x
		}
	}
	if len(ts.Resources) != maxNamesPerType || !ts.Truncated || ts.NACK == nil || len(ts.NACK.Error) > maxTextBytes || ts.NACK.Version != "" {
		t.Errorf("type t: %d names, truncated %v, NACK %+v", len(ts.Resources), ts.Truncated, ts.NACK)
	}
	got[0].Types[0].Resources[0] = "changed"
	if tb.list()[0].Types[0].Resources[0] == "changed" {
		t.Error("list returned the table's own slice")
	}
	tb.close(k)
	if n := len(tb.list()); n != 0 {
		t.Errorf("%d clients after close, want 0", n)
	}
	for i := range maxTrackedStreams + 1 {
		tb.open(streamKey{delta: true, id: int64(i)}, now)
	}
	if n := len(tb.list()); n != maxTrackedStreams {
		t.Errorf("%d clients listed, want at most %d", n, maxTrackedStreams)
	}
}
