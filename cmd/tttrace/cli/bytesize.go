package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a flag's number of bytes, written with an optional binary
// suffix: "4096", "64K", "64M", "1G" ("KiB", "KB" and lower case mean the
// same). Set parses it once; String writes it back in its largest exact
// unit, so the help shows defaults as they are typed.
type ByteSize struct {
	n uint64
	// powerOfTwo: only a power of two (at least 1) is taken.
	powerOfTwo bool
}

// maxByteSize bounds a size so that sums and int conversions cannot wrap.
const maxByteSize = 1 << 62

// Bytes is the size in bytes.
func (b *ByteSize) Bytes() uint64 { return b.n }

// Set parses s (pflag.Value).
func (b *ByteSize) Set(s string) error {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := uint64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || v > maxByteSize/mult {
		return fmt.Errorf("%q is not a number of bytes", s)
	}
	n := v * mult
	if b.powerOfTwo && (n == 0 || n&(n-1) != 0) {
		return fmt.Errorf("%s is not a power of two", s)
	}
	b.n = n
	return nil
}

// String writes the size in its largest exact unit (pflag.Value).
func (b *ByteSize) String() string {
	switch n := b.n; {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	default:
		return strconv.FormatUint(n, 10)
	}
}

// Type names the value in pflag's help when the usage names none.
func (b *ByteSize) Type() string { return "bytes" }
