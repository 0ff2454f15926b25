package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runExport(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "export", "SESSION --file BUNDLE | --all | -A",
		"Writes sessions, with every version they keep (or only their heads), to BUNDLE: a portable,\n"+
			"versioned, checksummed, compressed file that 'checkpointctl import' reads on any deployment.\n"+
			"SESSION exports all its agents unless --agent is given.")
	var k keyFlags
	var sel selection
	var prog progressFlag
	k.register(fs)
	sel.register(fs)
	prog.register(fs)
	file := fs.String("file", "", "the bundle file to write (required; - for stdout)")
	headOnly := fs.Bool("head-only", false, "only each session's head version")
	redact := fs.Bool("redact-image-paths", false, "replace image members naming local files (absolute paths, file: URLs) by a marker keeping only the extension; the bundle's hashes are then those of the redacted versions")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *file == "" {
		return usageErr(errors.New("export needs --file BUNDLE"))
	}
	if err := sel.check("export", pos); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	keys, err := sel.keys(ctx, c, k, fs, pos)
	if err != nil {
		return err
	}
	var w io.Writer = a.Stdout
	var f *os.File
	if *file != "-" {
		// Written beside the target and renamed into place: a failed export leaves no half bundle.
		if f, err = os.CreateTemp(filepath.Dir(*file), ".export-*"); err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		w = f
	}
	bar := newProgress(a, prog, "export", len(keys))
	sessions, versions, bytes := 0, 0, int64(0)
	var last checkpoint.Key
	sum, err := c.Export(ctx, w, keys, checkpoint.ExportOptions{HeadOnly: *headOnly, Source: a.Server, RedactImagePaths: *redact,
		Progress: func(key checkpoint.Key, _ uint64, n int64) {
			if key != last {
				sessions, last = sessions+1, key
			}
			versions, bytes = versions+1, bytes+n
			bar.update(sessions-1, versions, bytes)
		}})
	bar.update(len(keys), versions, bytes)
	bar.done()
	if err != nil {
		return err
	}
	if f != nil {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), *file); err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.Stderr, "exported %d session(s), %d version(s) (%s of conversations) to %s\n",
			len(sum.Sessions), sum.Versions, size(sum.Bytes), *file)
	}
	return err
}

func runImport(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "import", "BUNDLE",
		"Imports a bundle written by 'checkpointctl export'. The whole bundle is verified first (checksums,\n"+
			"every version's hash) and checked against the sessions already here; a corrupt, truncated or\n"+
			"contradicting bundle is refused (exit 7, or 4 for a contradiction) and nothing is imported.\n"+
			"Versions already here are skipped, so importing twice is harmless.")
	var out outputFlag
	var prog progressFlag
	out.register(fs)
	prog.register(fs)
	dryRun := fs.Bool("dry-run", false, "verify the bundle and check it against this deployment; import nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("import", pos, 1, "BUNDLE"); err != nil {
		return err
	}
	path := pos[0]
	if path == "-" {
		// Read twice (verify, then import): keep stdin in a temporary file.
		tmp, err := os.CreateTemp("", "checkpointctl-import-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		_, err = io.Copy(tmp, a.Stdin)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return inputError{err}
		}
		path = tmp.Name()
	} else if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return usageErr(err) // a mistyped path: the command line is wrong, not the input
	} else if err != nil {
		return inputError{err}
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	bar := newProgress(a, prog, "import", 0)
	versions, bytes := 0, int64(0)
	sum, n, err := c.ImportBundle(ctx, path, checkpoint.ImportOptions{DryRun: *dryRun,
		Progress: func(_ checkpoint.Key, _ uint64, b int64) {
			versions, bytes = versions+1, bytes+b
			bar.update(0, versions, bytes)
		}})
	bar.done()
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, map[string]any{"sessions": sum.Sessions, "versions": sum.Versions, "imported": n, "dryRun": *dryRun})
	}
	verb := "imported"
	if *dryRun {
		verb = "would import (dry run; verified)"
	}
	_, err = fmt.Fprintf(a.Stdout, "%s %d of %d version(s) in %d session(s) from %s\n", verb, n, sum.Versions, len(sum.Sessions), pos[0])
	return err
}
