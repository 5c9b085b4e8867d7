package etcd

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/internal/ratelimit"
)

// ClientLogger returns a logger for clientv3.Config.Logger that passes the
// etcd client's own warnings and errors to lg, and drops the rest. Errors
// are logged at slog's error level; warnings about the client's identity
// (a login refused, a token etcd no longer knows, a permission denied) at
// warn level, since nothing else shows them while the client recovers;
// other warnings at debug level: they repeat a failure that the request's
// own error reports (a member that does not answer). The etcd client logs
// a warning for every failed attempt of a request, which can be dozens a
// second while etcd is down: each message
// with each error is let through at most once every ten seconds after a
// burst of three,
// and the next line that is let through says how many were held back
// ("held"). Attempts that failed because this process cancelled them (its
// own shutdown) are left out. A nil lg keeps the etcd client silent, as
// ClientConfig does.
//
//	cfg := etcd.ClientConfig(endpoints...)
//	cfg.Logger = etcd.ClientLogger(log.With("component", "etcd-client"))
func ClientLogger(lg *slog.Logger) *zap.Logger {
	if lg == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{lg: lg, limits: &messageLimits{buckets: map[string]*ratelimit.Bucket{}}})
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	lg     *slog.Logger
	fields []zapcore.Field // from With
	limits *messageLimits  // shared by every core derived from one ClientLogger
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{lg: c.lg, fields: append(append([]zapcore.Field(nil), c.fields...), fields...), limits: c.limits}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	errText, _ := enc.Fields["error"].(string)
	if strings.HasSuffix(errText, context.Canceled.Error()) {
		return nil // a request this process gave up: its own shutdown
	}
	ok, held := c.limits.allow(e.Message+"\x00"+errText, e.Time)
	if !ok {
		return nil
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	if held > 0 {
		attrs = append(attrs, slog.Int("held", held))
	}
	level := slog.LevelDebug
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case aboutIdentity(errText):
		level = slog.LevelWarn
	}
	c.lg.LogAttrs(context.Background(), level, "etcd client: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// identityWords mark an etcd error about who the client is (its login, its
// token, its permissions), which nothing but the etcd client's log shows
// while the client recovers from it.
var identityWords = []string{"auth", "token", "user name is empty", "permission denied"}

// aboutIdentity reports whether errText is about the client's identity.
func aboutIdentity(errText string) bool {
	for _, w := range identityWords {
		if strings.Contains(errText, w) {
			return true
		}
	}
	return false
}

// messageLimits holds a token bucket per message and error text. The etcd
// client's messages are constants of its code and its errors few; past
// maxLimitedMessages texts, new ones share one bucket.
type messageLimits struct {
	mu      sync.Mutex
	buckets map[string]*ratelimit.Bucket
}

const (
	maxLimitedMessages = 256
	messageBurst       = 3
	messageEvery       = 10 * time.Second
)

func (m *messageLimits) allow(msg string, now time.Time) (bool, int) {
	m.mu.Lock()
	b, ok := m.buckets[msg]
	if !ok {
		if len(m.buckets) >= maxLimitedMessages {
			msg = ""
			b = m.buckets[msg]
		}
		if b == nil {
			b = &ratelimit.Bucket{Burst: messageBurst, Every: messageEvery}
			m.buckets[msg] = b
		}
	}
	m.mu.Unlock()
	return b.Allow(now)
}
