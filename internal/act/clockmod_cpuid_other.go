//go:build !amd64

package act

// cpuid exists only on amd64; haveCPUID keeps it from being called.
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32) {
	panic("act: cpuid on a non-amd64 build")
}

const haveCPUID = false
