package devices

// anomalyKind is something in the stream the ledger could not take at
// face value. Counts are kept for every kind; details for the first
// MaxAnomalies of a process only.
type anomalyKind uint8

const (
	anUnknownDevice        anomalyKind = iota // an alloc/CB/close names no chip or mesh the probe recognized
	anInvalidBufferType                       // buffer_type_ outside TT-Metal's enum
	anImplausibleSize                         // a size no device has (> 1 TiB): a wrong layout or bad read
	anReallocWithoutFree                      // a live Buffer* allocated again: its free was missed
	anCBWithoutProgram                        // a CB alloc with no allocate_circular_buffers seen on its thread
	anCBFreeWithoutProgram                    // a CB free with no deallocate_circular_buffers seen on its thread
	anMeshChipsUnknown                        // a mesh alloc not followed by views: the mesh's chips are unknown
	anReadError                               // the probe could not read the object
	anUnknownKind                             // an event kind this ledger does not know
	anAfterExit                               // an event of a process after its exit
	anTooManyBuffers                          // more live buffers than slot numbers
	anAccounting                              // the ledger's own bookkeeping disagreed with itself (a bug)
	anImplausibleTotal                        // a buffer or CB that would take the process over maxHeld bytes
	anTooManyChips                            // a chip past the process's Options.MaxChips distinct chips
	anAllocatorRecord                         // an allocator record the ledger cannot use (a bank manager of no buffer type)
	anAllocatorState                          // an allocation the allocator model cannot place: its state is no longer known
	anTooManyAllocators                       // an allocator outside a chip's dropped or refused: the process holds maxGroups
	nAnomalyKinds
)

var anomalyNames = [nAnomalyKinds]string{
	anUnknownDevice:        "unknown_device",
	anInvalidBufferType:    "invalid_buffer_type",
	anImplausibleSize:      "implausible_size",
	anReallocWithoutFree:   "realloc_without_free",
	anCBWithoutProgram:     "cb_without_program",
	anCBFreeWithoutProgram: "cb_free_without_program",
	anMeshChipsUnknown:     "mesh_chips_unknown",
	anReadError:            "read_error",
	anUnknownKind:          "unknown_event_kind",
	anAfterExit:            "event_after_exit",
	anTooManyBuffers:       "too_many_buffers",
	anAccounting:           "internal_accounting_error",
	anImplausibleTotal:     "implausible_total",
	anTooManyChips:         "too_many_chips",
	anAllocatorRecord:      "allocator_record",
	anAllocatorState:       "allocator_state_lost",
	anTooManyAllocators:    "too_many_allocators",
}

// MaxAnomalies caps the detailed lists of one process in the summary: its
// anomalies and its L1 clashes (the counts go on).
const MaxAnomalies = 100

type anomalyLog struct {
	counts [nAnomalyKinds]uint64
	list   []Anomaly
}

// Anomaly is one recorded anomaly.
type Anomaly struct {
	Kind   string `json:"kind"`   // e.g. "unknown_device"
	Seq    uint64 `json:"seq"`    // of the event
	TsNs   uint64 `json:"ts_ns"`  // of the event
	Tid    uint32 `json:"tid"`    // of the event
	Event  string `json:"event"`  // the event's type, e.g. "alloc"
	Detail string `json:"detail"` // for people
}
