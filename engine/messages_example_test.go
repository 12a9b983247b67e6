package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gxfer/gxfer/engine"
)

// A consumer hands its buffer's key to a producer in a message; the
// producer puts a block into it, then notifies with a message: when the
// consumer receives it, the block's bytes are in its buffer. (In real use
// they are two processes.)
func ExampleEndpoint_Send() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	consumer, _ := engine.New(cfg)
	defer consumer.Close()
	producer, _ := engine.New(cfg)
	defer producer.Close()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "consumer.sock")
	ln, err := consumer.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	ctx := context.Background()
	toConsumer, err := producer.Dial(ctx, "unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer toConsumer.Close()
	toProducer, _ := ln.Accept(ctx)
	defer toProducer.Close()

	// The consumer: a buffer for the block, its key sent in a message.
	kv, _ := consumer.Alloc(4096, engine.Host)
	key, _ := kv.Export()
	_ = toProducer.Send(ctx, key.Bytes())

	// The producer: the key, a Put, then the notification.
	m, _ := toConsumer.Recv(ctx)
	remote, _ := engine.ParseRemoteKey(m)
	block, _ := producer.Alloc(4096, engine.Host)
	copy(block.Bytes(), "kv block 7")
	_ = toConsumer.PutSync(ctx, block.All(), remote)
	_ = toConsumer.Send(ctx, []byte("block 7 ready"))

	// The consumer: the message comes after the bytes.
	note, _ := toProducer.Recv(ctx)
	fmt.Println(string(note), "->", string(kv.Bytes()[:10]))
	// Output: block 7 ready -> kv block 7
}

// A consumer takes messages from two producers on one goroutine:
// WaitRecv waits for one of them without taking it, TryRecv takes what is
// there without waiting (here the consumer polls both endpoints in turn).
func ExampleEndpoint_TryRecv() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	consumer, _ := engine.New(cfg)
	defer consumer.Close()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "consumer.sock")
	ln, err := consumer.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	ctx := context.Background()
	var from [2]*engine.Endpoint
	for i := range from {
		producer, _ := engine.New(cfg)
		defer producer.Close()
		ep, err := producer.Dial(ctx, "unix", sock)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer ep.Close()
		from[i], _ = ln.Accept(ctx)
		defer from[i].Close()
		_ = ep.Send(ctx, fmt.Appendf(nil, "from producer %d", i))
	}

	_ = from[1].WaitRecv(ctx) // producer 1's message is there
	for got := 0; got < 2; {
		for _, ep := range from {
			if m, ok, _ := ep.TryRecv(); ok {
				fmt.Println(string(m))
				got++
			}
		}
	}
	// Unordered output:
	// from producer 0
	// from producer 1
}
