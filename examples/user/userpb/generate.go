// Package userpb holds the example user service's protocol: user.proto and
// the code generated from it, checked in so that building the example needs
// no protoc. Regenerate with `go generate` in this directory, using protoc
// 3.21.12, protoc-gen-go v1.36.12 and protoc-gen-go-grpc 1.6.2 (the
// versions the checked-in code was generated with).
package userpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative user.proto
