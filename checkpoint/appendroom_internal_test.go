package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A session's queue is full at maxQueuedAppends appends or maxQueuedBytes of messages, whichever
// comes first; an empty queue takes one append of any size.
func TestAppendQueue_Full(t *testing.T) {
	q := &appendQueue{}
	require.False(t, q.full(2*maxQueuedBytes), "an empty queue takes any append")
	q.queued = make([]*asyncAppend, maxQueuedAppends-1)
	require.False(t, q.full(1))
	q.queued = append(q.queued, &asyncAppend{})
	require.True(t, q.full(1), "at its count")
	q.queued, q.queuedBytes = q.queued[:1], maxQueuedBytes-10
	require.False(t, q.full(10))
	require.True(t, q.full(11), "past its bytes")
}
