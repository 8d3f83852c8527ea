package cli

import (
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/diff"
	tthtml "github.com/tttrace/tttrace/sinks/html"
)

// htmlOutput is --html: the report as one self-contained HTML page, made
// as every output file is (outFile).
func htmlOutput(e *outputEnv) (sinks.Sink, error) {
	if e.f.HTML == "" {
		return nil, nil
	}
	o, err := e.file(e.f.HTML)
	if err != nil {
		return nil, fail(ExitError, "--html: %w", err)
	}
	return tthtml.New(o), nil
}

// writeDiffHTML writes the comparison page of res to path (an outFile).
func writeDiffHTML(res *diff.Result, path string) error {
	o, err := newOutFile(path, false)
	if err != nil {
		return err
	}
	err = tthtml.WriteDiff(o, res)
	if err == nil {
		err = o.Keep()
	}
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	return err
}
