package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/conv"
)

// asFlags are restore's provider view: --as and the options that shape it (conv.ViewOptions).
type asFlags struct {
	dialect          string
	omit             string
	compactionAsUser bool
	cacheControl     int
	reminder         string
}

func (f *asFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dialect, "as", "", "write the conversation as this dialect (a provider view): "+strings.Join(checkpoint.Dialects(), ", "))
	fs.StringVar(&f.omit, "omit", "", "with --as: leave out of the view, counted on stderr (comma-separated): thinking, extensions (a runtime's own records),\n"+
		"members (of each message, those the provider's API has no field for: anthropic, openai-chat, openai-responses)")
	fs.BoolVar(&f.compactionAsUser, "compaction-as-user", false, "with --as: write each compaction marker as a user message holding its summary")
	fs.IntVar(&f.cacheControl, "cache-control", 0, "with --as anthropic: mark the last block of the system prompt and of the last N messages with cache_control")
	fs.StringVar(&f.reminder, "reminder", "", "with --as: add this text at the end of the view (to the last user message, or as a new one)")
}

// check refuses, as usage mistakes, what does not go together, before connecting.
func (f *asFlags) check(merged bool) error {
	shaped := f.omit != "" || f.compactionAsUser || f.cacheControl != 0 || f.reminder != ""
	switch {
	case f.dialect == "" && shaped:
		return usageErr(errors.New("--omit, --compaction-as-user, --cache-control and --reminder shape a view: they need --as"))
	case f.dialect == "":
		return nil
	case merged:
		return usageErr(errors.New("--as converts one agent's conversation: it does not combine with --merged"))
	case f.cacheControl < 0 || (f.cacheControl > 0 && f.dialect != "anthropic"):
		return usageErr(fmt.Errorf("--cache-control %d: only with --as anthropic, and not negative", f.cacheControl))
	}
	if o, err := f.options(); err != nil {
		return err
	} else if o.OmitMembers && !slices.Contains([]string{"anthropic", "openai-chat", "openai-responses"}, f.dialect) {
		return usageErr(fmt.Errorf("--omit members: only with --as anthropic, openai-chat or openai-responses (a provider's API)"))
	}
	return checkDialectName(f.dialect)
}

func checkDialectName(name string) error {
	for _, d := range checkpoint.Dialects() {
		if d == name {
			return nil
		}
	}
	return usageErr(fmt.Errorf("--as %q: want one of %s", name, strings.Join(checkpoint.Dialects(), ", ")))
}

func (f *asFlags) options() (conv.ViewOptions, error) {
	o := conv.ViewOptions{CompactionAsUser: f.compactionAsUser, CacheControl: f.cacheControl, Reminder: f.reminder}
	for _, w := range strings.Split(f.omit, ",") {
		switch strings.TrimSpace(w) {
		case "":
		case "thinking":
			o.OmitThinking = true
		case "extensions":
			o.OmitExtensions = true
		case "members":
			o.OmitMembers = true
		default:
			return o, usageErr(fmt.Errorf("--omit %q: want thinking, extensions or members", w))
		}
	}
	return o, nil
}

// convert turns restored bytes of dialect from into the view; a conversion that cannot carry
// something is refused input (exit 5), naming it.
func (f *asFlags) convert(a *App, restored []byte, from string) ([]byte, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	out, omitted, err := conv.As(restored, from, f.dialect, opts)
	if err != nil {
		return nil, inputError{err}
	}
	if len(omitted) > 0 {
		fmt.Fprintf(a.Stderr, "left out of the %s view, as --omit asked: %s\n", f.dialect, describeOmitted(omitted))
	}
	return out, nil
}

func describeOmitted(o conv.Omitted) string {
	var parts []string
	for what, n := range o {
		parts = append(parts, fmt.Sprintf("%d %s", n, what))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
