package ingest

import (
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

	var full requestWatch
	full.request("first", t0)
	for i := range maxWatchedNamespaces {
		full.request(string(rune('a'+i%26))+time.Duration(i).String(), t0)
	}
	if full.ingested("forgotten", later) {
		t.Fatal("past the namespaces it can remember, the watch stops judging")
	}
}
