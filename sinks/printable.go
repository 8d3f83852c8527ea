package sinks

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable is s made safe to print for people: every control character
// (C0, DEL, C1), every invisible format character (bidi overrides,
// zero-width ones) and every byte that is not UTF-8 becomes a visible
// escape (\x1b, \u202e). Command lines, paths, symbol and Python names come
// from traced processes and their files: printed raw, an escape sequence
// in an argv would drive the terminal of the person reading the report or
// the live view (often root's). Every human output passes what it prints
// from outside through Printable (or PrintableWriter), and so do the
// outputs that tools print as they are (the names in the --pprof profile,
// which `go tool pprof -top` prints, and in --folded stacks); the other
// machine outputs (NDJSON, Prometheus) have their own escaping.
func Printable(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s // the common case: nothing to escape, nothing allocated
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	escapeTo(&b, s[i:], false)
	return b.String()
}

func unsafeRune(r rune, n int) bool {
	return (r == utf8.RuneError && n <= 1) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// escapeTo writes s to b with unsafe runes escaped; keepNewlines leaves
// '\n' as it is (a writer of whole lines).
func escapeTo(b *strings.Builder, s string, keepNewlines bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteByte('\n')
		case r < 0x80 && unsafeRune(r, n):
			fmt.Fprintf(b, `\x%02x`, r)
		case unsafeRune(r, n):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

// PrintableWriter is w with everything written made Printable except line
// ends: for messages to people written whole (the log on stderr), whose
// arguments may come from outside. A character cut between two writes is
// escaped byte by byte.
func PrintableWriter(w io.Writer) io.Writer { return printableWriter{w} }

type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	s := string(b)
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != '\n' && unsafeRune(r, n) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return p.w.Write(b)
	}
	var sb strings.Builder
	escapeTo(&sb, s, true)
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Text writes for people: every string argument of Printf (commands,
// paths, symbol and Python names come from traced processes) is made
// Printable. The first write error is kept in Err, and later writes are
// skipped.
type Text struct {
	W   *bufio.Writer
	Err error
}

// Printf writes format with args, their strings made Printable.
func (t *Text) Printf(format string, args ...any) {
	if t.Err != nil {
		return
	}
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = Printable(s)
		}
	}
	_, t.Err = fmt.Fprintf(t.W, format, args...)
}
