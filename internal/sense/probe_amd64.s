#include "textflag.h"

// func flushChase(slots *uint64, start uint64, n uint64) uint64
//
// A pointer chase through 64-byte slots where every step first flushes the
// next slot's line from all caches (CLFLUSH) and fences, so each dependent
// load is served by DRAM: a DRAM-latency probe with a 16 KiB footprint
// instead of a buffer larger than the LLC.
TEXT ·flushChase(SB), NOSPLIT, $0-32
	MOVQ  slots+0(FP), SI
	MOVQ  start+8(FP), AX
	MOVQ  n+16(FP), CX
	TESTQ CX, CX
	JZ    done

loop:
	MOVQ    AX, DX
	SHLQ    $6, DX
	CLFLUSH (SI)(DX*1)
	MFENCE
	MOVQ    (SI)(DX*1), AX
	DECQ    CX
	JNZ     loop

done:
	MOVQ AX, ret+24(FP)
	RET
