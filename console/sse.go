package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// reconnectDelay is the retry time a stream asks browsers to wait before
// reconnecting.
const reconnectDelay = 500 * time.Millisecond

// eventStream writes server-sent events to one client.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startStream sends the headers of an event stream and the retry time.
func startStream(w http.ResponseWriter) (*eventStream, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	es := &eventStream{w: w, rc: http.NewResponseController(w)}
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", reconnectDelay.Milliseconds()); err != nil {
		return nil, err
	}
	return es, es.flush()
}

// send writes one event of type name with v as JSON data and id (omitted
// when 0), and flushes it.
func (es *eventStream) send(name string, id int64, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("console: encode %s event: %w", name, err)
	}
	buf := make([]byte, 0, len(data)+64)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, '\n')
	if id > 0 {
		buf = append(buf, "id: "...)
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, '\n')
	}
	// json.Marshal escapes newlines inside strings: data is one line.
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := es.w.Write(buf); err != nil {
		return err
	}
	return es.flush()
}

// comment writes a comment line, which keeps an idle connection open.
func (es *eventStream) comment() error {
	if _, err := es.w.Write([]byte(": ping\n\n")); err != nil {
		return err
	}
	return es.flush()
}

func (es *eventStream) flush() error {
	if err := es.rc.Flush(); err != nil {
		return fmt.Errorf("console: flush event stream: %w", err)
	}
	return nil
}

// lastEventID is the revision the client last received, from the
// Last-Event-ID header (sent by a reconnecting EventSource) or the
// lastEventId query parameter; 0 if none.
func lastEventID(r *http.Request) int64 {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
