package mcpserver

// Every answer is bounded: each list to the call's limit (default
// DefaultLimit, at most MaxLimit), each site to maxFrames frames per kind,
// each string from the run to maxString bytes, the caveats to maxCaveats;
// then, if the answer is still over Options.MaxAnswerBytes, it is made
// again with half the limit, down to one entry per list. What was left out
// is said in the answer's "cut" (which list, how many shown of how many),
// never dropped silently.

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/tttrace/tttrace/sinks"
)

const (
	// DefaultLimit and MaxLimit: entries per list in an answer.
	DefaultLimit = 20
	MaxLimit     = 500
	// DefaultMaxAnswerBytes bounds an answer's JSON.
	DefaultMaxAnswerBytes = 256 << 10
	// DefaultMaxRunBytes bounds a run file read.
	DefaultMaxRunBytes = 2 << 30
	// maxFrames: frames of each kind (Python, native) kept per site.
	maxFrames = 16
	// maxString bounds a string from a run (a command line, a frame's
	// function or file).
	maxString = 1024
	// maxCaveats bounds the caveats of an answer.
	maxCaveats = 64
)

// Cut says what an answer left out of one list.
type Cut struct {
	What  string `json:"what" jsonschema:"the list cut, and whose it is (e.g. pid 1234 buffers)"`
	Shown int    `json:"shown" jsonschema:"entries given"`
	Total uint64 `json:"total" jsonschema:"entries there are"`
}

// cutter keeps a list to its limit and notes what it left out.
type cutter struct {
	limit int
	cuts  []Cut
}

// keep returns the first c.limit entries of list; total is how many there
// are in all (0: len(list)), which may be more than list holds when the
// run itself kept only the first ones (then said too).
func keep[T any](c *cutter, what string, list []T, total uint64) []T {
	if total < uint64(len(list)) {
		total = uint64(len(list))
	}
	n := min(len(list), c.limit)
	if uint64(n) < total {
		c.cuts = append(c.cuts, Cut{What: what, Shown: n, Total: total})
	}
	if n == 0 {
		return []T{} // [] in JSON, not null
	}
	return list[:n:n]
}

// note records a cut made elsewhere (a top-k list).
func (c *cutter) note(what string, shown int, total uint64) {
	if uint64(shown) < total {
		c.cuts = append(c.cuts, Cut{What: what, Shown: shown, Total: total})
	}
}

// limitOf is a call's limit, within bounds.
func limitOf(n int) int {
	switch {
	case n <= 0:
		return DefaultLimit
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

// bounded builds an answer with build, again with half the limit while its
// JSON is over maxBytes, and sets its cuts and, when the limit was
// lowered, a caveat saying so.
func bounded[T any](maxBytes, limit int, build func(c *cutter) (T, error), finish func(T, []Cut, string) T) (T, error) {
	c := &cutter{limit: limit}
	for {
		c.cuts = nil
		a, err := build(c)
		if err != nil {
			return a, err
		}
		note := ""
		if c.limit < limit {
			note = fmt.Sprintf("lists were cut to %d entries (not %d) to keep the answer under %d bytes: ask with pid, device or a smaller limit for the rest", c.limit, limit, maxBytes)
		}
		a = finish(a, c.cuts, note)
		b, err := json.Marshal(a)
		if err != nil {
			return a, err
		}
		if len(b) <= maxBytes {
			return a, nil
		}
		if c.limit == 1 {
			var zero T
			return zero, fmt.Errorf("the answer is %d bytes with one entry per list, more than %d: narrow it with pid and device", len(b), maxBytes)
		}
		c.limit /= 2
	}
}

// str is s from a run, made printable and cut to maxString bytes.
func str(s string) string {
	if len(s) > maxString {
		n := maxString
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = fmt.Sprintf("%s... [%d bytes cut]", s[:n], len(s)-n)
	}
	return sinks.Printable(s)
}
