package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// ImagePaths is what Parse does with an image part that names a file on the writer's machine (an
// absolute path or a file: URL). Such a path reveals user names and directory layouts
// ("/Users/alice/..."), and nobody who restores the conversation elsewhere can open it.
type ImagePaths int

const (
	ImagePathsAllow  ImagePaths = iota // keep them (the zero value: stored data is parsed as it is)
	ImagePathsRefuse                   // refuse the conversation, naming the message and field
	ImagePathsRedact                   // replace each by a marker keeping only the file's extension
)

// ParseImagePaths reads a policy's name: refuse, redact or allow.
func ParseImagePaths(s string) (ImagePaths, error) {
	switch s {
	case "allow":
		return ImagePathsAllow, nil
	case "refuse":
		return ImagePathsRefuse, nil
	case "redact":
		return ImagePathsRedact, nil
	}
	return 0, fmt.Errorf("%q is not refuse, redact or allow", s)
}

func (p ImagePaths) String() string {
	return [...]string{"allow", "refuse", "redact"}[p]
}

// ErrLocalPath: an image part names a local file and the policy refuses it.
var ErrLocalPath = fmt.Errorf("%w: image names a local file", ErrMalformed)

// RedactedPathPrefix starts the marker that replaces a redacted path: "redacted:local-file" and the
// file name's extension, if any ("redacted:local-file.png").
const RedactedPathPrefix = "redacted:local-file"

// localPath is a path on the writer's machine: a file: URL, a Unix absolute path, a home-relative
// path, a Windows drive path or a UNC share.
var localPath = regexp.MustCompile(`^(?i:file:)|^/|^~/|^[A-Za-z]:[\\/]|^\\\\`)

// imagePathSpan is one string value naming a local file, at [start, end) of the message.
type imagePathSpan struct {
	field      string
	start, end int
	value      string
}

// nativeImages returns the string members of msg's image parts (those of "content", whatever the
// role) that name local files. Inline data and the MIME type are not names of files.
func nativeImages(msg []byte) []imagePathSpan {
	content, ok := members(msg).get("content")
	if !ok || kind(content) != '[' {
		return nil
	}
	base := cap(msg) - cap(content)
	var out []imagePathSpan
	_ = elements(content, func(i int, part []byte) error {
		if kind(part) != '{' {
			return nil
		}
		p := members(part)
		if t, ok := p.get("type"); !ok || kind(t) != '"' || stringValue(t) != "image" {
			return nil
		}
		for name, v := range p.all() {
			if name == "type" || name == "data" || name == "mimeType" || kind(v) != '"' {
				continue
			}
			if s := stringValue(v); localPath.MatchString(s) {
				start := base + cap(content) - cap(v)
				out = append(out, imagePathSpan{field: fmt.Sprintf("content[%d].%s", i, name), start: start, end: start + len(v), value: s})
			}
		}
		return nil
	})
	return out
}

// redactedMarker is the JSON string that replaces a local path: the marker and the extension of the
// file's name (nothing else of the path: not its directories, not its name).
func redactedMarker(value string) []byte {
	ext := path.Ext(strings.ReplaceAll(value, `\`, "/"))
	if len(ext) > 16 || strings.ContainsAny(ext, "?#") {
		ext = ""
	}
	b, _ := json.Marshal(RedactedPathPrefix + ext)
	return b
}

// applyImagePaths enforces lim.ImagePaths on the parsed conversation c: it refuses, or returns the
// conversation with every local path replaced (parsed again, so it is canonical and counted).
func applyImagePaths(c *Conversation, d dialect, lim Limits) (*Conversation, error) {
	if lim.ImagePaths == ImagePathsAllow {
		return c, nil
	}
	found := make(map[int][]imagePathSpan)
	for i, msg := range c.Messages {
		if !bytes.Contains(msg, []byte(d.marker)) { // cheap: most messages have no image
			continue
		}
		spans := d.images(msg)
		if len(spans) == 0 {
			continue
		}
		if lim.ImagePaths == ImagePathsRefuse {
			return nil, &ValidationError{Err: ErrLocalPath, Index: i, Field: spans[0].field, Offset: -1,
				Detail: "an absolute path or file: URL reveals the writer's user name and directories, and opens nowhere else; " +
					"send the image inline as \"data\" (the daemon runs with --image-paths refuse)"}
		}
		found[i] = spans
	}
	if len(found) == 0 {
		return c, nil
	}
	out := append(make([]byte, 0, c.Size()), '[')
	for i, msg := range c.Messages {
		if i > 0 {
			out = append(out, ',')
		}
		spans := found[i]
		slices.SortFunc(spans, func(a, b imagePathSpan) int { return a.start - b.start })
		at := 0
		for _, s := range spans {
			out = append(append(out, msg[at:s.start]...), redactedMarker(s.value)...)
			at = s.end
		}
		out = append(out, msg[at:]...)
	}
	return ParseLimited(append(out, ']'), Limits{MaxBytes: lim.MaxBytes, Dialect: lim.Dialect, Continues: lim.Continues,
		LargeStrings: lim.LargeStrings})
}

// localSpan returns v, a string member of msg named field, as a span when it names a local file.
func localSpan(msg, v []byte, field string) (imagePathSpan, bool) {
	if kind(v) != '"' {
		return imagePathSpan{}, false
	}
	s := stringValue(v)
	if !localPath.MatchString(s) {
		return imagePathSpan{}, false
	}
	start := cap(msg) - cap(v)
	return imagePathSpan{field: field, start: start, end: start + len(v), value: s}, true
}
