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
