// Package syncbuf is a text buffer that several goroutines may write at
// once: the sink of a logger that a test reads while the code under test
// still logs.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer collects what is written to it. The zero Buffer is empty and
// ready; it is safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
