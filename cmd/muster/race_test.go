//go:build race

package main

// raceEnabled: the tests that build the command build it as they were
// built, so that the build reuses their compiled packages.
const raceEnabled = true
