package ipc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/ipc"
)

// Two ends of a control channel in one process: the listener shares host
// memory by sending its memfd; the dialer maps it and reads what the
// listener wrote.
func Example() {
	dir, err := os.MkdirTemp("", "gxfer-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	ln, err := ipc.Listen(filepath.Join(dir, "engine.sock"), ipc.Config{})
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	accepted := make(chan *ipc.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			panic(err)
		}
		accepted <- c
	}()
	client, err := ipc.Dial(ctx, ln.Path(), ipc.Config{})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	server := <-accepted
	defer server.Close()
	fmt.Println("peer is this process:", server.Peer().PID == uint32(os.Getpid()))

	// Exporter: shared memory, sent as an fd (a wire frame in real use).
	shm, err := ipc.NewShared(4096, "example")
	if err != nil {
		panic(err)
	}
	defer shm.Close()
	copy(shm.Bytes(), "hello from the exporter")
	if err := server.Send([]byte("memfd"), []*fd.FD{shm.FD()}); err != nil {
		panic(err)
	}

	// Importer: receive the fd, map it, close the fd (the mapping stays).
	buf := make([]byte, 64)
	n, fds, err := client.Recv(buf)
	if err != nil {
		panic(err)
	}
	m, err := ipc.MapShared(fds[0], 4096)
	_ = fds[0].Close()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	fmt.Printf("%s: %s\n", buf[:n], m.Bytes()[:23])
	// Output:
	// peer is this process: true
	// memfd: hello from the exporter
}
