package registrytest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// Audit reads every key under a prefix in a loop while a test runs and
// records each breach of the registry's invariants: a key without a lease,
// a value that does not decode, a value that does not match its key, and
// an instance (service and ID) stored under two keys.
type Audit struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	problems []string
	rounds   int
}

// StartAudit starts auditing the keys under prefix (a registry prefix, such
// as registry.DefaultPrefix) through cli, about every 10ms, until Stop.
func StartAudit(cli *clientv3.Client, prefix string) *Audit {
	ctx, cancel := context.WithCancel(context.Background())
	a := &Audit{cancel: cancel, done: make(chan struct{})}
	go a.run(ctx, cli, prefix)
	return a
}

func (a *Audit) run(ctx context.Context, cli *clientv3.Client, prefix string) {
	defer close(a.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := cli.Get(gctx, strings.TrimRight(prefix, "/")+"/", clientv3.WithPrefix())
		cancel()
		if err == nil {
			a.check(prefix, resp)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

func (a *Audit) check(prefix string, resp *clientv3.GetResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rounds++
	byInstance := map[string]string{}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if kv.Lease == 0 {
			a.problems = append(a.problems, fmt.Sprintf("rev %d: key %s has no lease", resp.Header.Revision, key))
		}
		in, err := registry.Unmarshal(kv.Value)
		if err != nil {
			a.problems = append(a.problems, fmt.Sprintf("rev %d: key %s: %v", resp.Header.Revision, key, err))
			continue
		}
		if want := registry.Key(prefix, in.Name, in.ID); want != key {
			a.problems = append(a.problems, fmt.Sprintf("rev %d: key %s holds instance %s", resp.Header.Revision, key, want))
		}
		id := in.Name + "/" + in.ID
		if other, dup := byInstance[id]; dup {
			a.problems = append(a.problems, fmt.Sprintf("rev %d: instance %s under keys %s and %s", resp.Header.Revision, id, other, key))
		}
		byInstance[id] = key
	}
}

// Stop ends the audit and fails t with every problem found, or if the
// audit never managed to read etcd. It returns the number of reads.
func (a *Audit) Stop(t testing.TB) int {
	t.Helper()
	a.cancel()
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rounds == 0 {
		t.Fatalf("the key audit never read etcd")
	}
	if len(a.problems) > 0 {
		n := len(a.problems)
		if n > 20 {
			a.problems = a.problems[:20]
		}
		t.Fatalf("key audit over %d reads found %d problems: %v", a.rounds, n, a.problems)
	}
	return a.rounds
}
