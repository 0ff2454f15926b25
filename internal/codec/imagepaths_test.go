package codec

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestImagePaths(t *testing.T) {
	img := func(field, value string) string {
		return `{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","mimeType":"image/png",` + field + `:"` + value + `"}],"timestamp":1}`
	}
	local := []string{
		`file:///Users/alice/Desktop/shot.png`, `FILE://host/share/a.jpg`, `/home/bob/.cache/x.webp`,
		`~/Pictures/cat.gif`, `C:\\Users\\carol\\a.PNG`, `c:/temp/b`, `\\\\server\\share\\c.bmp`,
	}
	remote := []string{`https://example.com/a.png`, `data:image/png;base64,AAAA`, `images/relative.png`, `s3://bucket/k.png`, ``}

	t.Run("refuse names the message and field", func(t *testing.T) {
		for _, v := range local {
			conv := `[{"role":"user","content":"hi"},` + img(`"url"`, v) + `]`
			_, err := ParseLimited([]byte(conv), Limits{ImagePaths: ImagePathsRefuse})
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), v)
			require.ErrorIs(t, err, ErrLocalPath)
			require.ErrorIs(t, err, ErrMalformed)
			require.Equal(t, 1, ve.Index)
			require.Equal(t, "content[1].url", ve.Field)
			require.NotContains(t, err.Error(), "alice", "the refusal does not repeat the path")
		}
		// Any member of an image part that names a file, not only url; in tool results too.
		conv := `[{"role":"toolResult","toolCallId":"t","content":[{"type":"image","data":"QUJD","fileURL":"file:///tmp/x.png"}]}]`
		_, err := ParseLimited([]byte(conv), Limits{ImagePaths: ImagePathsRefuse})
		require.ErrorIs(t, err, ErrLocalPath)
		require.Contains(t, err.Error(), "content[0].fileURL")
	})
	t.Run("remote images and text mentioning paths are kept", func(t *testing.T) {
		for _, v := range remote {
			conv := `[` + img(`"url"`, v) + `,{"role":"user","content":"see file:///Users/alice/a.png"}]`
			c, err := ParseLimited([]byte(conv), Limits{ImagePaths: ImagePathsRefuse})
			require.NoError(t, err, v)
			require.Equal(t, conv, string(c.Encode()))
		}
	})
	t.Run("redact keeps only the extension", func(t *testing.T) {
		conv := `[` + img(`"url"`, `file:///Users/alice/Desktop/shot.png`) + `,` +
			`{"role":"user","content":[{"type":"image","path":"/home/bob/x.tar.gz","url":"C:\\Users\\carol\\noext"}]}]`
		c, err := ParseLimited([]byte(conv), Limits{ImagePaths: ImagePathsRedact})
		require.NoError(t, err)
		got := string(c.Encode())
		for _, secret := range []string{"alice", "bob", "carol", "Desktop", "shot", "home"} {
			require.NotContains(t, got, secret)
		}
		require.Equal(t, `[`+img(`"url"`, `redacted:local-file.png`)+`,`+
			`{"role":"user","content":[{"type":"image","path":"redacted:local-file.gz","url":"redacted:local-file"}]}]`, got)
		require.Equal(t, 2, c.Stats().User)
		again, err := ParseLimited(c.Encode(), Limits{ImagePaths: ImagePathsRefuse})
		require.NoError(t, err, "a redacted conversation is acceptable under refuse")
		require.Equal(t, got, string(again.Encode()))
	})
	t.Run("allow keeps everything, and is the zero value", func(t *testing.T) {
		conv := `[` + img(`"url"`, `file:///Users/alice/a.png`) + `]`
		c, err := Parse([]byte(conv))
		require.NoError(t, err)
		require.Equal(t, conv, string(c.Encode()))
	})
	t.Run("policy names", func(t *testing.T) {
		for _, p := range []ImagePaths{ImagePathsAllow, ImagePathsRefuse, ImagePathsRedact} {
			q, err := ParseImagePaths(p.String())
			require.NoError(t, err)
			require.Equal(t, p, q)
		}
		_, err := ParseImagePaths("Refuse")
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), "refuse, redact or allow"))
	})
}
