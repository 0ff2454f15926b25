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
	var out outputFlag
	k.register(fs)
	out.register(fs)
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
	if out == "json" && *file == "-" {
		return usageErr(errors.New("export -o json needs --file BUNDLE: with --file -, stdout carries the bundle"))
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
	}
	if out == "json" {
		return writeJSON(a.Stdout, exportReport{File: *file, Sessions: orEmpty(sum.Sessions), Versions: sum.Versions, Bytes: sum.Bytes})
	}
	if f != nil {
		_, err = fmt.Fprintf(a.Stderr, "exported %d session(s), %d version(s) (%s of conversations) to %s\n",
			len(sum.Sessions), sum.Versions, size(sum.Bytes), *file)
	}
	return err
}

// exportReport is export's -o json: the bundle written and what it holds.
type exportReport struct {
	File     string                     `json:"file"`
	Sessions []checkpoint.BundleSession `json:"sessions"`
	Versions int                        `json:"versions"`
	Bytes    int64                      `json:"bytes"` // conversation bytes of every version, whole
}
