package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// url is where the examples' checkpointd listens: a real embedded nats-server and daemon started
// by TestMain on a random port and a temporary directory (in the README: nats://127.0.0.1:4222).
var url string

func TestMain(m *testing.M) { testenv.RunWithDaemon(m, &url) }

// The package documentation's example: save after each turn, restore anywhere.
func Example() {
	ctx := context.Background()
	c, err := checkpoint.Connect(url, nil) // e.g. "nats://127.0.0.1:4222"; nil: no extra nats.Options
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	key := checkpoint.Key{Session: "support-ticket-42"}
	conversationJSON := []byte(`[{"role":"user","content":"My order has not arrived."}]`)
	v, err := c.Save(ctx, key, conversationJSON) // durable when it returns
	if err != nil {
		log.Fatal(err)
	}
	conv, v, err := c.Restore(ctx, key, 0) // 0: the head
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", v.Version, string(conv))
	// Output: version 1 [{"role":"user","content":"My order has not arrived."}]
}

// The README's SDK snippet: a save that expects the head it last saw, so that two writers never
// interleave; the stale one is refused with ErrConflict.
func ExampleExpectVersion() {
	ctx := context.Background()
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	key := checkpoint.Key{Session: "tour"}
	turn1 := []byte(`[{"role":"user","content":"hi"}]`)
	turn2 := []byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hello"}]}]`)
	var prev uint64 // 0: the session must not exist yet
	v, err := c.Save(ctx, key, turn1, checkpoint.ExpectVersion(prev))
	if err != nil {
		log.Fatal(err)
	}
	prev = v.Version
	v, err = c.Save(ctx, key, turn2, checkpoint.ExpectVersion(prev))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved version", v.Version)

	_, err = c.Save(ctx, key, turn1, checkpoint.ExpectVersion(prev)) // a writer that missed version 2
	fmt.Println("stale writer refused:", errors.Is(err, checkpoint.ErrConflict))

	conv, v, err := c.Restore(ctx, key, 0) // 0 = the head
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("head", v.Version, string(conv))
	// Output:
	// saved version 2
	// stale writer refused: true
	// head 2 [{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hello"}]}]
}

// The README's "Moving a session": Resume leases a session and restores its head; saves carry the
// lease's epoch; Pause saves a final checkpoint and releases the lease.
func ExampleClient_Resume() {
	ctx := context.Background()
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := checkpoint.Key{Session: "moving"}
	if _, err := c.Save(ctx, key, []byte(`[{"role":"user","content":"start"}]`)); err != nil {
		log.Fatal(err)
	}

	conv, v, lease, err := c.Resume(ctx, key) // acquire (renewed in the background) + restore the head
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed version", v.Version, string(conv))
	conv = []byte(`[{"role":"user","content":"start"},{"role":"assistant","content":[{"type":"text","text":"carrying on"}]}]`)
	v, err = lease.Save(ctx, conv) // saves carry the epoch
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved version", v.Version)
	v, err = lease.Pause(ctx, conv) // final checkpoint (reason "pause"), then release
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused at version", v.Version, "reason", v.Reason)
	// Output:
	// resumed version 1 [{"role":"user","content":"start"}]
	// saved version 2
	// paused at version 3 reason pause
}

// Paging a large namespace N sessions at a time, in the order they were created: each page goes on
// from the previous page's Next, until Next is "".
func ExampleClient_ListPage() {
	ctx := context.Background()
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, s := range []string{"t1", "t2", "t3", "t4", "t5"} {
		if _, err := c.Save(ctx, checkpoint.Key{Namespace: "tickets", Session: s}, []byte(`[]`)); err != nil {
			log.Fatal(err)
		}
	}
	cursor := "" // the first page
	for {
		page, err := c.ListPage(ctx, "tickets", cursor, 2) // at most 2 sessions a page
		if err != nil {
			log.Fatal(err)
		}
		for _, s := range page.Sessions {
			fmt.Print(s.Key.Session, " ")
		}
		fmt.Println("|")
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	// Output:
	// t1 t2 |
	// t3 t4 |
	// t5 |
}
