package html

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html/template"
	"io"
	"strings"
)

// The page's template, style and script, inline in every page. The
// Content-Security-Policy names the hashes of the one style and the one
// script: nothing else runs, and nothing is fetched (default-src 'none').

//go:embed page.tmpl
var pageTemplate string

//go:embed diff.tmpl
var diffTemplate string

//go:embed page.css
var pageStyle string

//go:embed page.js
var pageScript string

var (
	tmpl = template.Must(template.Must(template.New("page").Parse(pageTemplate)).Parse(diffTemplate))
	csp  = "default-src 'none'; script-src '" + hash(pageScript) + "'; style-src '" + hash(pageStyle) +
		"'; img-src 'none'; base-uri 'none'; form-action 'none'"
)

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(h[:])
}

// view is what the template is executed with.
type view struct {
	*page
	CSP    string
	Style  template.CSS
	Script template.JS
	JSON   template.JS
}

// writePage writes pg to w.
func writePage(w io.Writer, pg *page) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	// Data is JSON from encoding/json, which escapes <, > and &: it cannot
	// end the script element it is in.
	v := view{page: pg, CSP: csp, Style: template.CSS(pageStyle), Script: template.JS(pageScript),
		JSON: template.JS(strings.TrimSpace(pg.Data))}
	if err := tmpl.ExecuteTemplate(bw, "page", v); err != nil {
		return err
	}
	return bw.Flush()
}
