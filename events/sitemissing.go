package events

// SiteMissing says why an alloc whose stack was to be captured (stacks on)
// has no complete allocation site: no site at all, or a site without its
// modules or its Python frames. Zero: nothing is missing (or stacks are
// off). Its NDJSON name (String) is the alloc's `site_missing` field, and
// the summary counts the allocs per reason (docs/ndjson.md).
type SiteMissing uint8

const (
	SiteComplete SiteMissing = iota
	// MissingStackLost: BPF could not capture or emit the stack (the ring
	// was too full, the capture busy): the alloc's stack_lost.
	MissingStackLost
	// MissingStackNotDelivered: the alloc said its stack follows, and it
	// never came (given up when tracing ended or too much was held).
	MissingStackNotDelivered
	// MissingStaleToken: the alloc named a known stack by a token its
	// process no longer has (an earlier process of its pid).
	MissingStaleToken
	// MissingProcessEnded: the stack came, but its process had ended
	// before tttrace could read its maps: its pcs cannot be placed in
	// modules.
	MissingProcessEnded
	// MissingMapsUnreadable: the process's maps could not be read for
	// another reason than its end.
	MissingMapsUnreadable
	// MissingPCNotInMaps: the stack's first pc is in no module of the
	// process's maps as read (a library mapped and the process gone
	// before it was read again): the site has a bare pc.
	MissingPCNotInMaps
	// MissingPythonNotRegistered: the native stack runs through a CPython
	// interpreter, and the interpreter was not registered for Python
	// stacks when the allocation was made: the site has no Python frames.
	MissingPythonNotRegistered
	// MissingPythonUnsupported: the same, under an interpreter tttrace
	// does not support (the summary's python.error says why).
	MissingPythonUnsupported
	// MissingPythonStack: the same, in a registered interpreter whose
	// Python stack for this allocation did not come (lost, or the walk
	// found no thread state).
	MissingPythonStack

	numSiteMissing
)

var siteMissingNames = [numSiteMissing]string{
	"", "stack_lost", "stack_not_delivered", "stale_token", "process_ended_before_maps",
	"maps_unreadable", "pc_not_in_maps", "python_not_registered", "python_unsupported", "python_stack_missing",
}

// NumSiteMissing is the number of SiteMissing values, SiteComplete
// included (for arrays indexed by reason).
const NumSiteMissing = int(numSiteMissing)

// String is the reason's NDJSON name ("" for SiteComplete).
func (m SiteMissing) String() string {
	if m < numSiteMissing {
		return siteMissingNames[m]
	}
	return "unknown"
}

// ParseSiteMissing is the reason named s (String), false for a name it
// does not know.
func ParseSiteMissing(s string) (SiteMissing, bool) {
	for i, n := range siteMissingNames {
		if i > 0 && n == s {
			return SiteMissing(i), true
		}
	}
	return SiteComplete, false
}
