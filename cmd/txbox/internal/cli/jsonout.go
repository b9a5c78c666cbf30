package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
)

// writeJSON writes v as indented JSON and a newline. encoding/json escapes
// control characters and replaces invalid UTF-8; writeJSON also escapes,
// as \uXXXX, every other rune strconv.IsPrint refuses (bidi overrides and
// other format characters), so that the JSON printed to a terminal holds
// nothing a terminal acts on. Outside strings JSON is ASCII, so escaping
// the whole text is safe.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSON(buf.Bytes()))
	return err
}

func escapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r < utf8.RuneSelf || strconv.IsPrint(r) {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		if r > 0xffff {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// isTerminal reports whether f, a standard stream, is a terminal: a file
// the terminal ioctl answers on (isatty), not any character device
// (/dev/null is one).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(file.Fd()) || isatty.IsCygwinTerminal(file.Fd())
}
