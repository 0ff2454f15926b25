package checkpoint_test

import (
	"context"
	"fmt"
	"log"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// Following a namespace live (what `checkpointctl watch` prints), and what its sessions store
// (`checkpointctl du`).
func ExampleClient_Watch() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	started := make(chan struct{})
	seen := make(chan checkpoint.Version)
	watched := make(chan error, 1)
	go func() {
		watched <- c.Watch(ctx, "watched", "", func(v checkpoint.Version) { seen <- v },
			checkpoint.OnWatchStarted(func() { close(started) }))
	}()
	<-started

	key := checkpoint.Key{Namespace: "watched", Session: "s"}
	for _, conv := range []string{`[{"role":"user","content":"one"}]`, `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`} {
		if _, err := c.Save(ctx, key, []byte(conv)); err != nil {
			log.Fatal(err)
		}
		v := <-seen
		fmt.Println("new version:", v.Key.Session, v.Version, v.Reason, v.Counts.Messages, "messages")
	}
	stop()
	fmt.Println("watch ended:", <-watched)

	u, err := c.Usage(context.Background(), key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("versions kept:", u.Versions, "head:", u.Head, "stores bytes:", u.StoredBytes > 0)
	// Output:
	// new version: s 1 turn 1 messages
	// new version: s 2 turn 2 messages
	// watch ended: <nil>
	// versions kept: 2 head: 2 stores bytes: true
}
