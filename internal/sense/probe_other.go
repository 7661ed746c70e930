//go:build !amd64

package sense

func flushChase(slots *uint64, start uint64, n uint64) uint64 { return start }

// Without CLFLUSH from Go there is no cheap DRAM probe; the dram kind is off.
const haveFlushChase = false
