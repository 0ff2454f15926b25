package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/importer"
)

// fromFlags are import's flags for another runtime's session file.
type fromFlags struct {
	format, session string
	key             keyFlags
	row             int
}

func (f *fromFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "from", "", "import a session file of this runtime instead of a bundle: "+strings.Join(importer.Formats, ", "))
	fs.StringVar(&f.session, "session", "", "with --from: the session to create")
	f.key.register(fs)
	fs.IntVar(&f.row, "row", 0, "with --from openhands: the row of an evaluation output (output.jsonl) to import, from 0")
}

// maxImportFile bounds the session file read: far above any real session, well below memory.
const maxImportFile = 1 << 30

func runImportFrom(ctx context.Context, a *App, f fromFlags, pos []string, out outputFlag, dryRun bool) error {
	switch {
	case f.format == "" || f.session == "":
		return usageErr(errors.New("import of a session file takes --from FORMAT and --session NAME"))
	case !slices.Contains(importer.Formats, f.format):
		return usageErr(fmt.Errorf("--from %q: want one of %s", f.format, strings.Join(importer.Formats, ", ")))
	}
	if err := wantArgs("import --from", pos, 1, "FILE"); err != nil {
		return err
	}
	data, err := readImportFile(a, pos[0])
	if err != nil {
		return err
	}
	r, err := importer.Import(f.format, data, importer.Options{Row: f.row})
	if err != nil {
		return inputError{fmt.Errorf("%s: %w", pos[0], err)}
	}
	key := f.key.key(f.session)
	var v checkpoint.Version
	if !dryRun {
		c, err := a.connect()
		if err != nil {
			return err
		}
		defer c.Close()
		v, err = c.Save(ctx, key, r.Conversation, checkpoint.ExpectVersion(0), checkpoint.WithReason("import"))
		if err != nil {
			return err
		}
	}
	if out == "json" {
		return writeJSON(a.Stdout, map[string]any{"from": f.format, "file": pos[0], "key": key, "version": v.Version, "dryRun": dryRun,
			"records": r.Records, "messages": r.Messages, "mapped": r.Typed, "extensions": r.Extensions})
	}
	verb := fmt.Sprintf("imported %s as %s version %d", pos[0], printable(key.String()), v.Version)
	if dryRun {
		verb = fmt.Sprintf("would import %s as %s (dry run; converted and validated)", pos[0], printable(key.String()))
	}
	_, err = fmt.Fprintf(a.Stdout, "%s: %s\n", verb, r)
	return err
}

func readImportFile(a *App, path string) ([]byte, error) {
	var r io.Reader = a.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, usageErr(err) // a mistyped path
		} else if err != nil {
			return nil, inputError{err}
		}
		defer file.Close()
		r = file
	}
	data, err := io.ReadAll(io.LimitReader(r, maxImportFile+1))
	if err != nil {
		return nil, inputError{err}
	}
	if len(data) > maxImportFile {
		return nil, inputError{fmt.Errorf("%s: larger than %d bytes", path, maxImportFile)}
	}
	return data, nil
}
