package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func TestFromBuildInfo_Absent(t *testing.T) {
	i := fromBuildInfo(nil, false)
	if i.Version != "devel" || i.Commit != "unknown" || i.Go != runtime.Version() {
		t.Fatalf("absent build info gave %+v, want devel/unknown/%s", i, runtime.Version())
	}
	if i.Protocol != wire.ProtocolVersion || i.VersionRecordFormat != wire.VersionFormat || i.BlobFormat != codec.FormatVersion {
		t.Fatalf("format versions %+v do not match wire/codec", i)
	}
}

func TestFromBuildInfo_Release(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	i := fromBuildInfo(bi, true)
	if i.Version != "v1.2.3" || i.Commit != "abc123+dirty" || i.Go != "go1.99.1" {
		t.Fatalf("got %+v", i)
	}
	m := i.Metadata()
	if m["version"] != "v1.2.3" || m["commit"] != "abc123+dirty" || m["protocol"] != wire.ProtocolVersion ||
		m["version_record_format"] != strconv.Itoa(wire.VersionFormat) || m["blob_format"] != strconv.Itoa(codec.FormatVersion) {
		t.Fatalf("metadata %v", m)
	}
	for _, want := range []string{"v1.2.3", "abc123+dirty", "go1.99.1", "protocol " + wire.ProtocolVersion} {
		if !strings.Contains(i.String(), want) {
			t.Fatalf("%q lacks %q", i.String(), want)
		}
	}
}

func TestFromBuildInfo_WorkTree(t *testing.T) {
	i := fromBuildInfo(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true)
	if i.Version != "devel" || i.Commit != "unknown" {
		t.Fatalf("work-tree build gave %+v", i)
	}
}
