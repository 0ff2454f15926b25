package ingest

import (
	"fmt"
	"testing"
	"time"
)

func TestRequestWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later := t0.Add(2 * clockMargin)
	var w requestWatch
	if w.ingested("old", later) {
		t.Fatal("no request received yet: the daemon may not answer requests, nothing to judge")
	}
	w.request("new", t0)
	if w.ingested("old", t0.Add(clockMargin/2)) {
		t.Fatal("published within the clocks' margin of the first request: not judged")
	}
	if !w.ingested("old", later) {
		t.Fatal("a namespace saving off the stream while requests work for others: warned")
	}
	if w.ingested("old", later) {
		t.Fatal("warned once per namespace")
	}
	if w.ingested("new", later) {
		t.Fatal("a namespace that sends requests too is not warned about")
	}

	// A client that reaches every namespace sends a request to more of them than the watch
	// remembers: the watch used to stop judging, which silenced the warning for everyone.
	var flooded requestWatch
	flooded.request("modern", t0)
	for i := range 2 * maxWatchedNamespaces {
		flooded.request(fmt.Sprint("flood-", i), t0)
	}
	if !flooded.ingested("legacy", later) {
		t.Fatal("a flood of requests does not silence the warning for a namespace that sent none")
	}
	if len(flooded.requested.in) != maxWatchedNamespaces || len(flooded.requested.order) != maxWatchedNamespaces {
		t.Fatalf("remembers %d requesters, at most %d", len(flooded.requested.in), maxWatchedNamespaces)
	}
	flooded.request("modern", t0) // a namespace that keeps sending requests is remembered again
	if flooded.ingested("modern", later) {
		t.Fatal("a namespace that sends requests is not warned about")
	}
	// Its saves off the stream, in more namespaces than the watch remembers: a namespace warned
	// about after them still is.
	for i := range 2 * maxWatchedNamespaces {
		flooded.ingested(fmt.Sprint("stream-flood-", i), later)
	}
	if !flooded.ingested("legacy-2", later) || flooded.ingested("legacy-2", later) {
		t.Fatal("warned once, after a flood of warnings")
	}
	if len(flooded.warned.in) != maxWatchedNamespaces {
		t.Fatalf("remembers %d warnings, at most %d", len(flooded.warned.in), maxWatchedNamespaces)
	}
}
