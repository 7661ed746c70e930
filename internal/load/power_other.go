//go:build !amd64

package load

// fmaAVX2 exists only on amd64; haveAVX2FMA keeps it from being called.
func fmaAVX2(n uint64, acc *powerAcc, m, c float64) { panic("load: fmaAVX2 on a non-amd64 build") }

func haveAVX2FMA() bool { return false }
