package main

import "errors"

// cleanups is a stack of what a command started and must stop, run in the
// reverse order of starting: every error path and the normal end share it.
type cleanups []func() error

// push adds f, to run before everything pushed earlier.
func (c *cleanups) push(f func() error) { *c = append(*c, f) }

// run runs and forgets every cleanup, the last pushed first, and returns
// their errors joined. Running it again does nothing.
func (c *cleanups) run() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		if err := (*c)[i](); err != nil {
			errs = append(errs, err)
		}
	}
	*c = nil
	return errors.Join(errs...)
}
