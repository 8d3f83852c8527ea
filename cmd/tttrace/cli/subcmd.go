package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/tttrace/tttrace/sinks"
)

// subcommand is the flag set of one `tttrace NAME` command that reads
// files (report, diff, mcp): a bad flag and the usage go to stderr,
// --help (the command's text, then its flags) to stdout.
type subcommand struct {
	*pflag.FlagSet
	name, text     string
	help           bool
	stdout, stderr io.Writer
}

func newSubcommand(name, text string, stdout, stderr io.Writer) *subcommand {
	c := &subcommand{FlagSet: pflag.NewFlagSet("tttrace "+name, pflag.ContinueOnError),
		name: name, text: text, stdout: stdout, stderr: stderr}
	c.SetOutput(stderr)
	c.SortFlags = false
	c.FlagSet.Usage = func() {
		fmt.Fprint(stderr, text)
		fmt.Fprint(stderr, c.FlagUsages())
	}
	return c
}

// parse adds --help after the command's own flags and parses args. done:
// the command is over (--help, a bad flag) with that exit status.
func (c *subcommand) parse(args []string) (status int, done bool) {
	c.BoolVarP(&c.help, "help", "h", false, "show this help")
	if err := c.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK, true
		}
		return c.usage("%v", err), true
	}
	if c.help {
		fmt.Fprint(c.stdout, c.text)
		fmt.Fprint(c.stdout, c.FlagUsages())
		return ExitOK, true
	}
	return ExitOK, false
}

// usage says what is wrong with the command line, on one line.
func (c *subcommand) usage(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "tttrace %s: %s\n", c.name, sinks.Printable(fmt.Sprintf(format, a...)))
	return ExitUsage
}
