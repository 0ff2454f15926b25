package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/importer"
)

func runImport(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "import", "BUNDLE | --from FORMAT FILE --session NAME",
		"Imports a bundle written by 'checkpointctl export'. The whole bundle is verified first (checksums,\n"+
			"every version's hash) and checked against the sessions already here; a corrupt, truncated or\n"+
			"contradicting bundle is refused (exit 7, or 4 for a contradiction) and nothing is imported.\n"+
			"Versions already here are skipped, so importing twice is harmless.\n\n"+
			"With --from, imports another runtime's session file instead, as version 1 of a new session\n"+
			"(docs/format.md §1.5): "+strings.Join(importer.Formats, ", ")+". Every record of the file becomes a\n"+
			"message: mapped to user, assistant and tool result messages where it is one, else kept as an\n"+
			"extension message holding the record; nothing is dropped. A file that is not of the format is\n"+
			"refused (exit 5), a session that exists already too (exit 4). Example:\n"+
			"  checkpointctl import --from claude-code ~/.claude/projects/p/3f2a.jsonl --session review")
	var out outputFlag
	var prog progressFlag
	var from fromFlags
	out.register(fs)
	prog.register(fs)
	from.register(fs)
	dryRun := fs.Bool("dry-run", false, "verify the bundle (or convert the file) and check it against this deployment; import nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if from.format != "" || from.session != "" {
		return runImportFrom(ctx, a, from, pos, out, *dryRun)
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
	bar := newProgress(a, prog, "import", unknownTotal)
	sessions, versions, bytes := 0, 0, int64(0)
	var last checkpoint.Key
	sum, n, err := c.ImportBundle(ctx, path, checkpoint.ImportOptions{DryRun: *dryRun,
		Progress: func(key checkpoint.Key, _ uint64, b int64) {
			if key != last { // a bundle holds sessions one after another
				sessions, last = sessions+1, key
			}
			versions, bytes = versions+1, bytes+b
			bar.update(sessions, versions, bytes)
		}})
	bar.finish(sessions, versions, bytes)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, map[string]any{"sessions": orEmpty(sum.Sessions), "versions": sum.Versions, "imported": n, "dryRun": *dryRun})
	}
	verb := "imported"
	if *dryRun {
		verb = "would import (dry run; verified)"
	}
	_, err = fmt.Fprintf(a.Stdout, "%s %d of %d version(s) in %d session(s) from %s\n", verb, n, sum.Versions, len(sum.Sessions), pos[0])
	return err
}
