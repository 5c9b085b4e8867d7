// Package greeterpb is the protocol of the demo's greeter service, with the
// code generated from greeter.proto by protoc 3.21.12, protoc-gen-go
// v1.36.12 and protoc-gen-go-grpc 1.6.2 (`go generate` here).
package greeterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative greeter.proto
