package admission

import (
	"testing"
	"time"
)

// A worker that settled a request waits for the next one (keeping its grown stack) instead of
// ending; stop ends it.
func TestWorkers_IdleWorkerTakesTheNextRequest(t *testing.T) {
	w := NewWorkers()
	done := make(chan struct{})
	w.Run(func() { close(done) })
	<-done
	second := make(chan struct{})
	select {
	case w.work <- func() { close(second) }: // taken only by a worker waiting for work
	case <-time.After(5 * time.Second):
		t.Fatal("no worker waits for the next request: each request would start a goroutine of its own")
	}
	<-second
	w.Stop()
	time.Sleep(50 * time.Millisecond) // the worker sees quit
	select {
	case w.work <- func() {}:
		t.Fatal("a worker still waits after stop")
	case <-time.After(100 * time.Millisecond):
	}
}
