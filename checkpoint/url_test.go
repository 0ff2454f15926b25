package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func TestPublicURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                   "nats://127.0.0.1:4222",
		"nats://alice:s3cret@host:4222":           "nats://host:4222",
		"nats://TOKEN@host:4222":                  "nats://host:4222",
		"nats://a:p1@n1:4222,nats://a:p1@n2:4222": "nats://n1:4222,nats://n2:4222",
		"tls://u:p%40ss@h:4222":                   "tls://h:4222",
		"demo.cpbundle":                           "demo.cpbundle",
		"":                                        "",
	} {
		require.Equal(t, want, checkpoint.PublicURL(in), in)
	}
}
