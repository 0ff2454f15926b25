// Package buildinfo says which checkpointd this is: the module version and VCS commit it was built
// from, the Go version, and the versions of the wire protocol and of the stored format it speaks.
// checkpointd --version, checkpointctl version, the NATS service's info and the
// checkpointd_build_info metric all report these same facts, so they never disagree.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Info is what a build reports about itself.
type Info struct {
	Version  string `json:"version"`  // module version, "devel" when built from a work tree (go run, go build)
	Commit   string `json:"commit"`   // VCS revision, "unknown" when the build did not record one; "+dirty" if modified
	Go       string `json:"go"`       // Go toolchain, e.g. go1.26.8
	Protocol string `json:"protocol"` // wire.ProtocolVersion: docs/protocol.md
	// Storage formats this build writes (docs/format.md): version records and blobs/conversations.
	VersionRecordFormat int `json:"version_record_format"`
	BlobFormat          int `json:"blob_format"`
}

// Get reads the build information embedded by the Go toolchain.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok)
}

// fromBuildInfo is Get without the global: the absent and partial cases are tested with it.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{
		Version: "devel", Commit: "unknown", Go: runtime.Version(),
		Protocol: wire.ProtocolVersion, VersionRecordFormat: wire.VersionFormat, BlobFormat: codec.FormatVersion,
	}
	if !ok || bi == nil {
		return info
	}
	// "(devel)" is what the toolchain records for the main module of a work-tree build.
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			dirty, _ = strconv.ParseBool(s.Value)
		}
	}
	if dirty && info.Commit != "unknown" {
		info.Commit += "+dirty"
	}
	return info
}

// String is the one line printed by --version, e.g.
// "version devel, commit 7c8ea80..., go1.26.8, protocol 1, storage format: version records 2, blobs 1".
func (i Info) String() string {
	return fmt.Sprintf("version %s, commit %s, %s, protocol %s, storage format: version records %d, blobs %d",
		i.Version, i.Commit, i.Go, i.Protocol, i.VersionRecordFormat, i.BlobFormat)
}

// Metadata is the info as string pairs, for the NATS micro service's metadata and metric labels.
func (i Info) Metadata() map[string]string {
	return map[string]string{
		"version":               i.Version,
		"commit":                i.Commit,
		"go_version":            i.Go,
		"protocol":              i.Protocol,
		"version_record_format": strconv.Itoa(i.VersionRecordFormat),
		"blob_format":           strconv.Itoa(i.BlobFormat),
	}
}
