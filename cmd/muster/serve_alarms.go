package main

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// alarmPollInterval is how often serve reads its etcd's alarms. etcd
// announces no change of them; reading them is a look at the server's
// memory.
const alarmPollInterval = time.Second

// alarmNames are the alarms etcd raises (NOSPACE, CORRUPT), sorted: each
// has its muster_etcd_alarm series, 0 while it is not raised.
var alarmNames = func() []string {
	var names []string
	for v, name := range pb.AlarmType_name {
		if v != int32(pb.AlarmType_NONE) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}()

var alarmDesc = prometheus.NewDesc("muster_etcd_alarm",
	"1 while the embedded etcd has the alarm raised (NOSPACE: the database reached --quota-backend-bytes, "+
		"writes and lease grants are refused; CORRUPT: the data failed a consistency check), else 0.",
	[]string{"alarm"}, nil)

// etcdAlarms follows the alarms of serve's embedded etcd. One goroutine
// reads them every alarmPollInterval, logs each alarm once when it is
// raised (at error level) and once when it is cleared, and keeps the set
// it read; Err (for /healthz) and Collect (muster_etcd_alarm, for
// /metrics) answer from that set and never wait on etcd. Its methods are
// safe for concurrent use.
type etcdAlarms struct {
	read   func() []string // the raised alarms' names, sorted
	quota  int64           // the backend quota in bytes, for the messages
	log    *slog.Logger
	raised atomic.Pointer[alarmSet] // as last read

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ prometheus.Collector = (*etcdAlarms)(nil)

// alarmSet is the alarms raised at a read, and since when some alarm has
// been raised (zero while none is).
type alarmSet struct {
	names []string
	since time.Time
}

// watchAlarms reads the alarms once (an alarm outlives a restart, so
// serve may start with one raised), then follows them until Close. read
// returns the names of the raised alarms, sorted, without waiting on I/O
// (embedetcd.Server.Alarms); quota is the backend quota in bytes.
func watchAlarms(read func() []string, quota int64, log *slog.Logger) *etcdAlarms {
	a := &etcdAlarms{read: read, quota: quota, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	a.raised.Store(&alarmSet{})
	a.poll()
	go a.run()
	return a
}

func (a *etcdAlarms) run() {
	defer close(a.done)
	tick := time.NewTicker(alarmPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C:
			a.poll()
		}
	}
}

// poll reads the alarms, keeps them, and logs those raised and cleared
// since the last read (once Err and Collect tell them). Called by
// watchAlarms and then by run only.
func (a *etcdAlarms) poll() {
	now := alarmSet{names: a.read()}
	if len(now.names) > 0 {
		now.since = a.raised.Load().since
		if now.since.IsZero() {
			now.since = time.Now()
		}
	}
	before := a.raised.Swap(&now).names
	for _, name := range now.names {
		if !slices.Contains(before, name) {
			a.log.Error("etcd raised the alarm "+name+": "+a.meaning(name), "alarm", name)
		}
	}
	for _, name := range before {
		if !slices.Contains(now.names, name) {
			a.log.Info("etcd cleared the alarm "+name+": it takes writes again", "alarm", name)
		}
	}
}

// meaning says what the alarm name means for the registry and what
// clears it.
func (a *etcdAlarms) meaning(name string) string {
	const refuses = "etcd refuses every write and lease grant, so no instance can register or re-register, until "
	switch name {
	case pb.AlarmType_NOSPACE.String():
		return fmt.Sprintf("the database reached its quota of %d bytes (--quota-backend-bytes); %s"+
			"an operator frees space and disarms the alarm (docs/SECURITY.md, \"Registry quota\")", a.quota, refuses)
	case pb.AlarmType_CORRUPT.String():
		return "the data failed etcd's consistency check; " + refuses + "an operator restores it and disarms the alarm"
	default:
		return "see etcd's documentation"
	}
}

// Err returns an error naming the alarms raised at the last read, nil
// when there are none.
func (a *etcdAlarms) Err() error {
	_, err := a.Raised()
	return err
}

// Raised returns since when some alarm has been raised and Err's error;
// zero and nil when none is.
func (a *etcdAlarms) Raised() (time.Time, error) {
	set := a.raised.Load()
	raised := set.names
	if len(raised) == 0 {
		return time.Time{}, nil
	}
	msgs := make([]string, len(raised))
	for i, name := range raised {
		msgs[i] = "etcd alarm " + name + ": " + a.meaning(name)
	}
	return set.since, errors.New(strings.Join(msgs, "; "))
}

// Describe implements prometheus.Collector.
func (a *etcdAlarms) Describe(ch chan<- *prometheus.Desc) { ch <- alarmDesc }

// Collect implements prometheus.Collector: muster_etcd_alarm of every
// alarm etcd knows, 1 for those raised at the last read.
func (a *etcdAlarms) Collect(ch chan<- prometheus.Metric) {
	raised := a.raised.Load().names
	for _, name := range alarmNames {
		v := 0.0
		if slices.Contains(raised, name) {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(alarmDesc, prometheus.GaugeValue, v, name)
	}
}

// Close stops following the alarms and waits for the goroutine. It is
// idempotent and returns nil.
func (a *etcdAlarms) Close() error {
	a.closeOnce.Do(func() { close(a.stop) })
	<-a.done
	return nil
}
