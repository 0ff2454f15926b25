package logstore

import (
	"fmt"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The subjects. Each id is validated (wire.ValidateID: non-empty UTF-8 of at most 256 bytes)
// and encoded (wire.EncodeID: one token of [A-Za-z0-9_-=]).

// LogSubjectPrefix is what a session's log subject starts with; the rest is its key's token.
const LogSubjectPrefix = "cp.log."

// LogSubject is the subject of k's log: LogSubjectPrefix and k's token.
func LogSubject(k engine.Key) (string, error) {
	wk := wire.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
	if err := wk.Validate(); err != nil {
		// quoted: the ids are a client's, and may hold anything (control characters, bytes
		// that are not UTF-8) that must not reach a log line raw
		return "", fmt.Errorf("logstore: key %q/%q/%q: %w", k.Namespace, k.Session, k.Agent, err)
	}
	return LogSubjectPrefix + wk.Token(), nil
}

func indexSubject(ns string) (string, error) {
	if err := wire.ValidateID(ns); err != nil {
		return "", fmt.Errorf("logstore: namespace %q: %w", ns, err)
	}
	return "cp.idx." + wire.EncodeID(ns), nil
}

// indexToken is what a session's index entry holds: its "<session>.<agent>" tokens.
func indexToken(k engine.Key) string { return wire.EncodeID(k.Session) + "." + wire.EncodeID(k.Agent) }

// valueSubject: value ids are ids like any other (the engine names values by their SHA-256 in
// hex, which EncodeID leaves as it is), so a client-chosen id never reaches a subject raw.
func valueSubject(ns, id string) (string, error) {
	if err := wire.ValidateID(ns); err != nil {
		return "", fmt.Errorf("logstore: value namespace %q: %w", ns, err)
	}
	if err := wire.ValidateID(id); err != nil {
		return "", fmt.Errorf("logstore: value id %q: %w", id, err)
	}
	return "cp.val." + wire.EncodeID(ns) + "." + wire.EncodeID(id), nil
}
