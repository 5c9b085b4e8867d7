// Package proctest holds what tests need to run servers as child
// processes and freeze them: a child that dies with the test process, and
// a wait for a signal (SIGSTOP, SIGCONT) to take effect, and ports that
// outgoing connections do not take while a server restarts on them
// (Ports).
package proctest
