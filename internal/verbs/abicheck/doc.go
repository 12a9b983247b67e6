// Package abicheck compiles the ABI declarations of internal/verbs (abi.h)
// next to the real <infiniband/verbs.h> and reports, for every struct size,
// field offset, field size, alignment and constant the shim relies on, what
// each side says. It exists only for its test. It needs libibverbs-dev, so
// its code builds only with the build tag verbsabi (without it this package
// is empty and the default build needs no RDMA headers):
//
//	apt-get install libibverbs-dev
//	go test -tags verbsabi ./internal/verbs/abicheck/
package abicheck
