// Package readme keeps the library snippet of the module's README.md
// compiled and tested: snippet_test.go holds it verbatim, and
// readme_test.go checks that README.md shows exactly that code and runs it
// against an embedded etcd.
package readme
