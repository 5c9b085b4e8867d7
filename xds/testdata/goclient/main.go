// Command goclient is a gRPC client in Go that finds its servers through
// xDS with the grpc-go version of its own module (go.mod pins the oldest
// grpc-go Muster supports), as a Go service that does not import Muster
// would: grpc-go's xDS resolver and balancers, no Muster code.
//
// Usage: goclient target interval-ms [name=value ...]
//
// Each name=value pair is sent as metadata on every call; "{n}" in a value
// is replaced by the call's number. The bootstrap comes from
// GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG. It calls
// muster.demo.greeter.v1.Greeter/SayHello in a loop, one call at a time,
// and prints one JSON line per call, as the Node and Python clients do:
//
//	{"n":1,"ok":true,"by":"127.0.0.1:40001"}
//	{"n":2,"ok":false,"code":14,"error":"..."}
//
// Each line also gives the call's duration in milliseconds, measured here
// ("ms"). A line "burst N GAP" on standard input makes it, after its
// current call, start N calls GAP milliseconds apart (0: at once) and
// print their lines once all have ended, with "burst" the burst's number
// (1 for the first), before it calls in its loop again. It exits when its
// standard input ends.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver and its balancers
	"google.golang.org/protobuf/encoding/protowire"
)

const method = "/muster.demo.greeter.v1.Greeter/SayHello"

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// servedBy returns field 2 (served_by) of a serialized HelloReply.
func servedBy(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

type line struct {
	N     int     `json:"n"`
	Burst int     `json:"burst,omitempty"`
	OK    bool    `json:"ok"`
	By    string  `json:"by,omitempty"`
	Code  int     `json:"code,omitempty"`
	Error string  `json:"error,omitempty"`
	MS    float64 `json:"ms"`
}

// burst is a "burst N GAP" command.
type burst struct {
	n   int
	gap time.Duration
}

// readCommands sends each "burst N GAP" line of r on bursts, and cancels
// once r ends.
func readCommands(r io.Reader, bursts chan<- burst, cancel func()) {
	defer cancel()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var b burst
		var gap int
		if _, err := fmt.Sscanf(sc.Text(), "burst %d %d", &b.n, &gap); err != nil || b.n < 1 || gap < 0 {
			fmt.Fprintf(os.Stderr, "goclient: %q is not burst N GAP\n", sc.Text())
			continue
		}
		b.gap = time.Duration(gap) * time.Millisecond
		bursts <- b
	}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: goclient target interval-ms [name=value ...]")
		os.Exit(2)
	}
	target := os.Args[1]
	ms, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient: interval:", err)
		os.Exit(2)
	}
	var pairs [][2]string
	for _, kv := range os.Args[3:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "goclient: %q is not name=value\n", kv)
			os.Exit(2)
		}
		pairs = append(pairs, [2]string{k, v})
	}
	ctx, cancel := context.WithCancel(context.Background())
	bursts := make(chan burst, 16)
	go readCommands(os.Stdin, bursts, cancel) // ends at EOF: the parent is gone
	conn, err := grpc.Dial(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
	defer conn.Close()
	req := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("go"))
	call := func(n int) line {
		md := metadata.MD{}
		for _, p := range pairs {
			md.Append(p[0], strings.ReplaceAll(p[1], "{n}", strconv.Itoa(n)))
		}
		cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), 2*time.Second)
		defer ccancel()
		var reply []byte
		t0 := time.Now()
		err := conn.Invoke(cctx, method, &req, &reply)
		l := line{N: n, OK: err == nil, MS: float64(time.Since(t0).Microseconds()) / 1000}
		if err != nil {
			s := status.Convert(err)
			l.Code, l.Error = int(s.Code()), s.Message()
		} else {
			l.By = servedBy(reply)
		}
		return l
	}
	enc := json.NewEncoder(os.Stdout)
	n, made := 0, 0 // calls, bursts
	for ctx.Err() == nil {
		n++
		l := call(n)
		if ctx.Err() != nil {
			return
		}
		if enc.Encode(l) != nil {
			return
		}
		select {
		case b := <-bursts:
			made++
			lines := make([]line, b.n)
			var wg sync.WaitGroup
			for i := range lines {
				if i > 0 {
					time.Sleep(b.gap)
				}
				n++
				wg.Add(1)
				go func(i, n int) {
					defer wg.Done()
					lines[i] = call(n)
					lines[i].Burst = made
				}(i, n)
			}
			wg.Wait()
			for _, l := range lines {
				if enc.Encode(l) != nil {
					return
				}
			}
		case <-ctx.Done():
		case <-time.After(time.Duration(ms) * time.Millisecond):
		}
	}
}
