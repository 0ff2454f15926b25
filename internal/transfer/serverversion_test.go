package transfer

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestCheckServerVersion(t *testing.T) {
	for _, c := range []struct {
		version   string
		clustered bool
		ok        bool
	}{
		{"2.11.0", true, true},
		{"v2.11.0", true, true},
		{"2.11.0+build.7", true, true},
		{"2.15.2", true, true},
		{"3.0.0", true, true},
		{"2.12.0-RC.1", true, true}, // a pre-release of a later version
		{"2.11.0-RC.1", true, false},
		{"2.10.29", true, false},
		{"2.9.10", true, false},
		{"2.9.21", true, false}, // #4319 alone is not enough
		{"2.9.10", false, true},
		{"v2.9.10", false, true},
		{"2.10.0", false, true},
		{"2.9.10-beta", false, false},
		{"2.9.9", false, false},
		{"2.8.4", false, false},
		{"1.99.99", false, false},
	} {
		err := checkServerVersion("test server", c.version, c.clustered)
		if c.ok {
			require.NoError(t, err, "%s clustered=%v", c.version, c.clustered)
			continue
		}
		var sv *ServerVersionError
		require.ErrorAs(t, err, &sv, "%s clustered=%v", c.version, c.clustered)
		require.NoError(t, sv.Err)
		require.Contains(t, err.Error(), "nats-server "+c.version+" (test server) is older than")
		if c.clustered {
			require.Contains(t, err.Error(), "older than 2.11.0")
			require.Contains(t, err.Error(), "#4320, #6194, #6485")
		} else {
			require.Contains(t, err.Error(), "older than 2.9.10")
		}
	}
}

func TestCheckServerVersion_GarbageIsRefused(t *testing.T) {
	for _, v := range []string{"", "banana", "2.11", "2.11.0.1", "2.x.0", "-2.11.0", "2.011.0", "2.11.+1", " 2.11.0", "v", "2..0"} {
		for _, clustered := range []bool{true, false} {
			err := checkServerVersion("test server", v, clustered)
			var sv *ServerVersionError
			require.ErrorAs(t, err, &sv, "%q", v)
			require.Error(t, sv.Err, "%q: a version that cannot be read is said so", v)
			require.Contains(t, err.Error(), "is not major.minor.patch", "%q", v)
			require.Contains(t, err.Error(), `"`+v+`"`, "the message quotes what the server sent")
		}
	}
}

func TestParseServerVersion_PreReleaseSortsBeforeItsRelease(t *testing.T) {
	rc, err := parseServerVersion("2.11.0-RC.1")
	require.NoError(t, err)
	require.Equal(t, serverVersion{major: 2, minor: 11, patch: 0, pre: "RC.1"}, rc)
	require.False(t, rc.atLeast(minClusteredServer))
	require.True(t, rc.atLeast(serverVersion{major: 2, minor: 10, patch: 29}))
}

// Each replicated stream is checked by the version its answering server wrote into the stream's
// metadata: absent before 2.11.0. edge.Streams of one replica need no check.
func TestCheckReplicatedStreams(t *testing.T) {
	info := func(name string, replicas int, ver string) *jetstream.StreamInfo {
		i := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: name, Replicas: replicas}}
		if ver != "" {
			i.Config.Metadata = map[string]string{"_nats.ver": ver}
		}
		return i
	}
	require.NoError(t, checkReplicatedStreams(info("A", 1, ""), info("B", 3, "2.11.0"), info("C", 3, "2.15.2")))

	err := checkReplicatedStreams(info("A", 3, "2.12.1"), info("KV_cp_heads", 3, ""))
	var sv *ServerVersionError
	require.True(t, errors.As(err, &sv))
	require.Contains(t, err.Error(), "stream KV_cp_heads")
	require.Contains(t, err.Error(), "does not report its version")
	require.Contains(t, err.Error(), "older than 2.11.0")

	err = checkReplicatedStreams(info("KV_cp_heads", 3, "2.11.0-RC.4"))
	require.ErrorContains(t, err, "nats-server 2.11.0-RC.4 (the server answering for stream KV_cp_heads) is older than 2.11.0")
}
