package settingfeed

import (
	"errors"
	"strconv"
	"testing"
)

// Send decodes, coalesces to the latest value and sends the zero value for
// none and for a value that does not decode, reporting the latter.
func TestSend(t *testing.T) {
	ch := make(chan int, 1)
	var bad []error
	report := func(err error) { bad = append(bad, err) }
	decode := func(b []byte) (int, error) { return strconv.Atoi(string(b)) }
	Send(ch, []byte("1"), decode, report)
	Send(ch, []byte("2"), decode, report)
	if v := <-ch; v != 2 {
		t.Fatalf("got %d, want the latest value 2", v)
	}
	Send(ch, []byte("x"), decode, report)
	if v := <-ch; v != 0 || len(bad) != 1 {
		t.Fatalf("bad value: got %d and %d reports, want 0 and 1", v, len(bad))
	}
	var ne *strconv.NumError
	if !errors.As(bad[0], &ne) {
		t.Fatalf("reported %v, want the decoder's error", bad[0])
	}
	Send(ch, nil, decode, report)
	if v := <-ch; v != 0 || len(bad) != 1 {
		t.Fatalf("no value: got %d and %d reports, want 0 and no new report", v, len(bad))
	}
}
