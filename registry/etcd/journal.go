package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/osuser"
	"github.com/musterhq/muster/registry"
)

// The journal: every operator write (SetOverride, ClearOverride, Delete,
// SetCanary, ClearCanary, SetPolicy, ClearPolicy) writes a
// registry.Record of itself in the same transaction as the change. Per
// service, the records live in a ring of slots under
// registry.JournalKey, bound to no lease, beside a sequence key
// (registry.JournalSeqKey) holding the number of the next record. A write
// reads what it changes and the sequence in one transaction, then commits
// the change, the record in slot seq mod the journal's size (overwriting
// the oldest), seq+1, and the removal of the slots from the size up, in
// one transaction guarded by the modification revisions of everything it
// read: the record's before is exactly what the change replaced, and a
// concurrent writer makes the commit fail and the write start again.

// ErrContended is returned by an operator write whose keys changed
// between its read and its commit maxWriteAttempts times in a row.
var ErrContended = errors.New("etcd: the keys of the write kept changing")

// maxWriteAttempts bounds the attempts of one operator write.
const maxWriteAttempts = 32

// tracedWrite is one operator write on service (and instance, if any).
type tracedWrite struct {
	service, instance string
	// reads are the keys the write depends on, read first; the commit is
	// guarded by their modification revisions.
	reads []string
	// plan is the write, given what reads hold (a nil entry: absent).
	plan func(kvs []*mvccpb.KeyValue) (writePlan, error)
}

// writePlan is what an operator write changes.
type writePlan struct {
	// skip: nothing to change, and nothing to record.
	skip          bool
	action        string
	before, after []byte // stored values; nil: none
	ops           []clientv3.Op
}

// journaled runs w and writes its record in the same transaction, and
// returns the revision at which both landed (0 when w's plan skipped).
func journaled(ctx context.Context, cli *clientv3.Client, o options, w tracedWrite) (int64, error) {
	who := o.by
	if who == "" {
		who = defaultWho(cli)
	}
	seqKey := registry.JournalSeqKey(o.prefix, w.service)
	keys := append(append([]string(nil), w.reads...), seqKey)
	gets := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		gets[i] = clientv3.OpGet(k)
	}
	for range maxWriteAttempts {
		resp, err := cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			// One transaction reads them all: a refusal may be for any of
			// them (a user who may read the instance but not the journal).
			return 0, fmt.Errorf("etcd: read %s: %w", strings.Join(keys, " and "), err)
		}
		kvs := make([]*mvccpb.KeyValue, len(keys))
		cmps := make([]clientv3.Cmp, len(keys))
		for i, r := range resp.Responses {
			rev := int64(0) // etcd's modification revision of an absent key
			if got := r.GetResponseRange().GetKvs(); len(got) > 0 {
				kvs[i], rev = got[0], got[0].ModRevision
			}
			cmps[i] = clientv3.Compare(clientv3.ModRevision(keys[i]), "=", rev)
		}
		p, err := w.plan(kvs[:len(w.reads)])
		if err != nil || p.skip {
			return 0, err
		}
		var seq uint64
		if kv := kvs[len(w.reads)]; kv != nil {
			if seq, err = registry.ParseJournalSeq(kv.Value); err != nil {
				return 0, fmt.Errorf("etcd: journal of %s: %w", w.service, err)
			}
		}
		rec, err := registry.MarshalRecord(registry.Record{
			Seq: seq, Time: time.Now().UTC(), Who: who, Source: o.source, Action: p.action,
			Service: w.service, Instance: w.instance, Before: asJSON(p.before), After: asJSON(p.after),
		})
		if err != nil {
			return 0, err
		}
		ring := registry.JournalKey(o.prefix, w.service)
		ops := append(p.ops,
			clientv3.OpPut(registry.JournalSlotKey(o.prefix, w.service, int(seq%uint64(o.journal))), string(rec)),
			clientv3.OpPut(seqKey, strconv.FormatUint(seq+1, 10)),
			// The slots a larger journal left.
			clientv3.OpDelete(registry.JournalSlotKey(o.prefix, w.service, o.journal), clientv3.WithRange(clientv3.GetPrefixRangeEnd(ring))))
		tr, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: write %s and its record under %s: %w", keys[0], ring, err)
		}
		if tr.Succeeded {
			return tr.Header.Revision, nil
		}
		// Changed since the read (another write, a re-registration):
		// read again.
	}
	return 0, fmt.Errorf("%w: %s, %d attempts", ErrContended, keys[0], maxWriteAttempts)
}

// defaultWho is who a write is recorded as made by without WithBy: the
// client's etcd user, else the process's OS user.
func defaultWho(cli *clientv3.Client) string {
	if cli.Username != "" {
		return osuser.Clean(cli.Username)
	}
	return osuser.Name()
}

// asJSON is a stored value as a record holds it: itself when it is JSON,
// else a JSON string of it; nil stays nil (null).
func asJSON(v []byte) json.RawMessage {
	if v == nil || json.Valid(v) {
		return v
	}
	s, _ := json.Marshal(string(v)) // a string always marshals
	return s
}

// valueOf is kv's value, nil for an absent key.
func valueOf(kv *mvccpb.KeyValue) []byte {
	if kv == nil {
		return nil
	}
	return kv.Value
}

// History reads the journal of service's operator writes, or of every
// service's when service is "", newest first: at most limit records (0:
// all, which is at most the journal's size per service). A stored record
// that does not decode is left out. Writes made with etcdctl or any other
// etcd client directly leave no record.
func History(ctx context.Context, cli *clientv3.Client, service string, limit int, opts ...Option) ([]registry.Record, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if limit < 0 {
		return nil, fmt.Errorf("etcd: History: limit %d is negative", limit)
	}
	root := registry.JournalRoot(o.prefix)
	prefix := root
	if service != "" {
		if err := registry.ValidateName(service); err != nil {
			return nil, err
		}
		prefix = registry.JournalKey(o.prefix, service)
	}
	ctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
	defer cancel()
	gopts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend)}
	if limit > 0 && service != "" {
		// Every key of a service's ring is a record.
		gopts = append(gopts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := cli.Get(ctx, prefix, gopts...)
	if err != nil {
		return nil, fmt.Errorf("etcd: read the journal %s: %w", prefix, err)
	}
	var out []registry.Record
	for _, kv := range resp.Kvs {
		if !strings.Contains(strings.TrimPrefix(string(kv.Key), root), "/") {
			continue // a sequence key
		}
		rec, err := registry.UnmarshalRecord(kv.Value)
		if err != nil {
			continue
		}
		rec.Revision = kv.ModRevision
		if out = append(out, rec); limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}
