package checkpoint

import (
	"bytes"
	"encoding/json"
)

// Change is one difference between two versions of a conversation, by message index.
type Change struct {
	Op    string          `json:"op"`            // "added", "removed" or "changed"
	Index int             `json:"index"`         // index in the newer conversation ("removed": in the older)
	Old   json.RawMessage `json:"old,omitempty"` // the message before ("removed", "changed")
	New   json.RawMessage `json:"new,omitempty"` // the message after ("added", "changed")
}

// diffMessages compares two conversations message by message. Messages the two share at the start and at
// the end are equal; between them, messages at the same position are "changed", and what one side
// has beyond the other is "added" or "removed". An appended turn is all "added"; an edited message
// is one "changed".
func diffMessages(older, newer [][]byte) []Change {
	p := 0
	for p < len(older) && p < len(newer) && bytes.Equal(older[p], newer[p]) {
		p++
	}
	s := 0
	for s < len(older)-p && s < len(newer)-p && bytes.Equal(older[len(older)-1-s], newer[len(newer)-1-s]) {
		s++
	}
	a, b := older[p:len(older)-s], newer[p:len(newer)-s]
	changes := []Change{}
	for i := 0; i < min(len(a), len(b)); i++ {
		changes = append(changes, Change{Op: "changed", Index: p + i, Old: a[i], New: b[i]})
	}
	for i := len(a); i < len(b); i++ {
		changes = append(changes, Change{Op: "added", Index: p + i, New: b[i]})
	}
	for i := len(b); i < len(a); i++ {
		changes = append(changes, Change{Op: "removed", Index: p + i, Old: a[i]})
	}
	return changes
}
