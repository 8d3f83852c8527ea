package ttmetal

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Built-in layout profiles: one JSON file each in profiles/, embedded. A
// profile is the layout of one line of TT-Metal releases ("fields", the
// keys of the field table) and the symbol fingerprint that selects it:
// predicates the library must satisfy ("requires") and must not
// ("forbids"), evaluated by predicate.holds over what ResolveSymbols saw.
// A new profile is a new file (docs/layout.md, "Adding a profile").

//go:embed profiles/*.json
var profileFiles embed.FS

// Profile is a built-in layout and the fingerprint that selects it.
type Profile struct {
	Name     string      `json:"name"`
	About    string      `json:"about"`
	Layout   Layout      `json:"fields"`
	Requires []predicate `json:"requires"`
	Forbids  []predicate `json:"forbids"`
}

// predicate is one fact about a library's symbols, as data. Exactly one of
// Namespace and Symbols is set.
type predicate struct {
	// Name identifies the fact (doctor reports it: "v0_namespace" ...); a
	// name means the same predicate in every profile.
	Name string `json:"name"`
	// About says what it is, for people.
	About string `json:"about"`
	// Namespace: some symbol tttrace looks up is in this C++ namespace
	// ("tt::tt_metal::v0").
	Namespace string `json:"namespace,omitempty"`
	// Symbols: the library defines one of these mangled names (or its
	// spelling in namespace v0).
	Symbols []string `json:"symbols,omitempty"`
}

var loadProfiles = sync.OnceValues(func() ([]Profile, error) {
	files, err := profileFiles.ReadDir("profiles")
	if err != nil {
		return nil, err
	}
	var out []Profile
	preds := map[string]predicate{}
	for _, f := range files {
		b, err := profileFiles.ReadFile(path.Join("profiles", f.Name()))
		if err != nil {
			return nil, err
		}
		var p Profile
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("profile %s: %w", f.Name(), err)
		}
		p.Layout.Name = p.Name
		if err := p.Layout.check(); err != nil {
			return nil, fmt.Errorf("profile %s: %w", f.Name(), err)
		}
		for _, q := range slices.Concat(p.Requires, p.Forbids) {
			if (q.Namespace == "") == (len(q.Symbols) == 0) || q.Name == "" {
				return nil, fmt.Errorf("profile %s: predicate %q: give a name and one of namespace, symbols", f.Name(), q.Name)
			}
			if old, ok := preds[q.Name]; ok && !reflect.DeepEqual(old, q) {
				return nil, fmt.Errorf("profile %s: predicate %q differs from another profile's", f.Name(), q.Name)
			}
			preds[q.Name] = q
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
})

// builtinProfiles returns the embedded profiles, by name. They are part of
// the program: one that does not load is a build error, caught by tests.
func builtinProfiles() []Profile {
	p, err := loadProfiles()
	if err != nil {
		panic(err)
	}
	return p
}

func builtinProfile(name string) Profile {
	for _, p := range builtinProfiles() {
		if p.Name == name {
			return p
		}
	}
	panic("no built-in profile " + name)
}

// matches reports whether the library's symbols fit the profile.
func (p *Profile) matches(s *Symbols) bool {
	for _, q := range p.Requires {
		if !q.holds(s) {
			return false
		}
	}
	for _, q := range p.Forbids {
		if q.holds(s) {
			return false
		}
	}
	return true
}

// fingerprint says what the profile needs, for people.
func (p *Profile) fingerprint() string {
	var parts []string
	for _, q := range p.Requires {
		parts = append(parts, q.About)
	}
	for _, q := range p.Forbids {
		parts = append(parts, "no "+q.About)
	}
	return strings.Join(parts, ", ")
}

// holds evaluates the predicate on what ResolveSymbols saw.
func (q *predicate) holds(s *Symbols) bool {
	if q.Namespace != "" {
		pre := mangledNamespace(q.Namespace)
		for n := range s.seen {
			for _, head := range []string{"_ZN", "_ZNK"} {
				if strings.HasPrefix(n, head+pre) {
					return true
				}
			}
		}
		return false
	}
	for _, n := range spellings(q.Symbols...) {
		if s.seen[n] {
			return true
		}
	}
	return false
}

// mangledNamespace is the Itanium nested-name prefix of ns without its
// _ZN: "tt::tt_metal::v0" -> "2tt8tt_metal2v0".
func mangledNamespace(ns string) string {
	var b strings.Builder
	for _, c := range strings.Split(ns, "::") {
		b.WriteString(strconv.Itoa(len(c)) + c)
	}
	return b.String()
}

// profileSymbols are the names the profiles' predicates look for, for the
// symbol scan.
func profileSymbols() []string {
	var out []string
	for _, p := range builtinProfiles() {
		for _, q := range slices.Concat(p.Requires, p.Forbids) {
			out = append(out, spellings(q.Symbols...)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Fingerprint evaluates every predicate of the built-in profiles on the
// library: name -> whether it holds (doctor's "v0_namespace" ...).
func (s *Symbols) Fingerprint() map[string]bool {
	out := map[string]bool{}
	for _, p := range builtinProfiles() {
		for _, q := range slices.Concat(p.Requires, p.Forbids) {
			out[q.Name] = q.holds(s)
		}
	}
	return out
}
