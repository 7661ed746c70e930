package sense

// flushChase follows n steps of the cycle in slots starting at start,
// flushing each line before loading it. Implemented in probe_amd64.s.
//
//go:noescape
func flushChase(slots *uint64, start uint64, n uint64) uint64

const haveFlushChase = true
