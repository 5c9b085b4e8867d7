package main

import (
	"errors"
	"reflect"
	"testing"
)

// Cleanups run last pushed first, their errors joined, and once.
func TestCleanupsRunInReverseOnce(t *testing.T) {
	var ran []int
	var c cleanups
	failed := errors.New("etcd did not stop")
	c.push(func() error { ran = append(ran, 1); return failed })
	c.push(func() error { ran = append(ran, 2); return nil })
	c.push(func() error { ran = append(ran, 3); return nil })
	if err := c.run(); !errors.Is(err, failed) {
		t.Fatalf("run: %v, want the first cleanup's error", err)
	}
	if err := c.run(); err != nil {
		t.Fatalf("second run: %v, want nil", err)
	}
	if want := []int{3, 2, 1}; !reflect.DeepEqual(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}
