package load

import "golang.org/x/sys/cpu"

// fmaAVX2 runs n iterations of 12 independent VFMADD213PD on YMM registers
// (acc = acc*m + c, 4 float64 lanes each), loading the accumulators from acc
// and storing them back. Implemented in power_amd64.s; needs AVX2 and FMA.
//
//go:noescape
func fmaAVX2(n uint64, acc *powerAcc, m, c float64)

// haveAVX2FMA reports whether this CPU and OS can run fmaAVX2 (x/sys/cpu
// checks that the OS saves the YMM state).
func haveAVX2FMA() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }
