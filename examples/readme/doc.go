// Package readme keeps the library programs of the module's docs
// compiled and tested: snippet_test.go holds README.md's (the short form:
// etcd.Open, server.Serve, resolver.Dial) verbatim, explicit_test.go
// docs/LIBRARY.md's (each part made by hand), and readme_test.go checks
// that each page shows exactly its program and runs both against an
// embedded etcd.
package readme
