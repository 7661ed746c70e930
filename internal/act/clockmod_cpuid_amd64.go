package act

// cpuid executes CPUID with EAX=leaf, ECX=subleaf on the calling CPU.
// Implemented in clockmod_cpuid_amd64.s.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

const haveCPUID = true
