package testenv

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// GrepDataDir returns the files under dir that hold marker: as they are, or in what any zstd frame
// inside them decodes to (frames are found by their magic number at any offset; the engine stores
// conversations compressed). Tests of encryption at rest use it to show that nothing readable is
// left on disk.
func GrepDataDir(t testing.TB, dir, marker string) []string {
	t.Helper()
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderConcurrency(1))
	require.NoError(t, err)
	defer dec.Close()
	magic := []byte{0x28, 0xB5, 0x2F, 0xFD}
	var found []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(marker)) {
			found = append(found, path)
			return nil
		}
		for off := 0; ; off++ {
			i := bytes.Index(data[off:], magic)
			if i < 0 {
				return nil
			}
			off += i
			if err := dec.Reset(bytes.NewReader(data[off:])); err != nil {
				continue
			}
			plain, _ := io.ReadAll(io.LimitReader(dec, 64<<20)) // what decodes before any error
			if bytes.Contains(plain, []byte(marker)) {
				found = append(found, path+" (zstd)")
				return nil
			}
		}
	}))
	return found
}
