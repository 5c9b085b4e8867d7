// Command muster runs and inspects a Muster service registry: serve runs an
// embedded etcd as the registry, ls lists services and instances, watch
// follows a service's changes. Run "muster help" for the full list.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, restore the default handling, so that a
	// second Ctrl-C stops a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
