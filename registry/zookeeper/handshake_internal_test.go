package zookeeper

import (
	"testing"
	"time"
)

func TestHandshakeEndsAfterConnectResponse(t *testing.T) {
	var h handshake
	resp := []byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 9}
	for i, b := range resp[:6] { // byte by byte: header split across reads
		h.read([]byte{b})
		if h.done() {
			t.Fatalf("done after %d bytes", i+1)
		}
	}
	h.read(resp[6:]) // the last byte of the response and the next frame
	if !h.done() {
		t.Fatalf("not done after the response")
	}
	if h.n != 7 {
		t.Fatalf("counted %d bytes, want 7 (not past the response)", h.n)
	}
}

func TestBoundDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	far, near := now.Add(time.Minute), now.Add(time.Second)
	if got := boundDeadline(far, now, 2*time.Second, false); !got.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("far deadline during the handshake: %v", got)
	}
	if got := boundDeadline(time.Time{}, now, 2*time.Second, false); !got.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("no deadline during the handshake: %v", got)
	}
	if got := boundDeadline(near, now, 2*time.Second, false); !got.Equal(near) {
		t.Fatalf("near deadline during the handshake: %v", got)
	}
	if got := boundDeadline(far, now, 2*time.Second, true); !got.Equal(far) {
		t.Fatalf("far deadline after the handshake: %v", got)
	}
}
