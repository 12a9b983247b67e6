#include "textflag.h"

// Copy kernels (non-overlapping ranges only). Each takes dst, src
// unsafe.Pointer and n uintptr; the Go wrappers check the CPU features.

// ALIGN_DST(mask) copies the (mask+1 - DI&mask) & mask bytes that bring
// the destination DI to a mask+1 boundary with REP MOVSB, advancing DI
// and SI and leaving the bytes still to copy in CX (clobbers DX, BX).
#define ALIGN_DST(mask) \
	MOVQ	DI, DX; \
	NEGQ	DX; \
	ANDQ	$mask, DX; \
	SUBQ	DX, CX; \
	MOVQ	CX, BX; \
	MOVQ	DX, CX; \
	REP;	MOVSB; \
	MOVQ	BX, CX

// func copyAVX2(dst, src unsafe.Pointer, n uintptr)
// 32-byte AVX2 loads and temporal stores, 256 bytes per iteration with
// the source prefetched (PREFETCHT0) 1 KiB ahead, one line per 64 bytes
// copied; then 32-byte blocks, then the tail (< 32 bytes) with REP
// MOVSB. The prefetch is what brings it level with glibc's memcpy on a
// copy from and to L3 (docs/copy-kernels.md); a prefetch past the end of
// the source never faults.
TEXT ·copyAVX2(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	CMPQ	CX, $256
	JB	avx_b32
avx_b256:
	PREFETCHT0	1024(SI)
	PREFETCHT0	1088(SI)
	PREFETCHT0	1152(SI)
	PREFETCHT0	1216(SI)
	VMOVDQU	(SI), Y0
	VMOVDQU	32(SI), Y1
	VMOVDQU	64(SI), Y2
	VMOVDQU	96(SI), Y3
	VMOVDQU	128(SI), Y4
	VMOVDQU	160(SI), Y5
	VMOVDQU	192(SI), Y6
	VMOVDQU	224(SI), Y7
	VMOVDQU	Y0, (DI)
	VMOVDQU	Y1, 32(DI)
	VMOVDQU	Y2, 64(DI)
	VMOVDQU	Y3, 96(DI)
	VMOVDQU	Y4, 128(DI)
	VMOVDQU	Y5, 160(DI)
	VMOVDQU	Y6, 192(DI)
	VMOVDQU	Y7, 224(DI)
	ADDQ	$256, SI
	ADDQ	$256, DI
	SUBQ	$256, CX
	CMPQ	CX, $256
	JAE	avx_b256
avx_b32:
	CMPQ	CX, $32
	JB	avx_tail
	VMOVDQU	(SI), Y0
	VMOVDQU	Y0, (DI)
	ADDQ	$32, SI
	ADDQ	$32, DI
	SUBQ	$32, CX
	JMP	avx_b32
avx_tail:
	VZEROUPPER
	REP;	MOVSB
	RET

// func copyNT(dst, src unsafe.Pointer, n uintptr)
// Non-temporal: the destination is first brought to a 32-byte boundary
// (REP MOVSB), then 128 bytes per iteration are loaded (VMOVDQU, with two
// PREFETCHNTA 448 and 640 bytes ahead, the distances of the runtime's own
// non-temporal loop, gobble_mem_fwd_loop in memmove_amd64.s: one at 512
// was 0.7x copy() from memory on a Zen 5, docs/copy-kernels.md) and
// stored with VMOVNTDQ, bypassing the caches; the
// rest as in copyAVX2. SFENCE orders the weakly-ordered stores before
// the return, so the copy is globally visible like an ordinary one.
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	CMPQ	CX, $256
	JB	nt_small
	ALIGN_DST(31)
nt_b128:
	PREFETCHNTA	448(SI)
	PREFETCHNTA	640(SI)
	VMOVDQU	(SI), Y0
	VMOVDQU	32(SI), Y1
	VMOVDQU	64(SI), Y2
	VMOVDQU	96(SI), Y3
	VMOVNTDQ	Y0, (DI)
	VMOVNTDQ	Y1, 32(DI)
	VMOVNTDQ	Y2, 64(DI)
	VMOVNTDQ	Y3, 96(DI)
	ADDQ	$128, SI
	ADDQ	$128, DI
	SUBQ	$128, CX
	CMPQ	CX, $128
	JAE	nt_b128
nt_b32:
	CMPQ	CX, $32
	JB	nt_tail
	VMOVDQU	(SI), Y0
	VMOVNTDQ	Y0, (DI)
	ADDQ	$32, SI
	ADDQ	$32, DI
	SUBQ	$32, CX
	JMP	nt_b32
nt_tail:
	SFENCE
	VZEROUPPER
nt_small:
	REP;	MOVSB
	RET

// func copyNTPages(dst, src unsafe.Pointer, n uintptr)
// Non-temporal over four pages at once: after the destination is brought
// to a 64-byte boundary (REP MOVSB), each 16 KiB block is copied as four
// 4 KiB streams advanced together, 128 bytes of each per iteration (all
// 16 loads, each page's next two lines prefetched with PREFETCHT0, then
// 16 VMOVNTDQ stores), as glibc's large_memcpy_4x does
// (sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S): on the Xeon
// guest of docs/copy-kernels.md one stream at a time (copyNT) stored
// from memory at about 6 GB/s, below REP MOVSB, and glibc's four at
// 8-11. The rest (under 16 KiB) goes through copyNT's 128-byte loop.
TEXT ·copyNTPages(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	CMPQ	CX, $32768
	JB	ntp_rest
	ALIGN_DST(63)
ntp_block:
	MOVQ	$32, R8
ntp_inner:
	PREFETCHT0	256(SI)
	PREFETCHT0	4352(SI)
	PREFETCHT0	8448(SI)
	PREFETCHT0	12544(SI)
	PREFETCHT0	320(SI)
	PREFETCHT0	4416(SI)
	PREFETCHT0	8512(SI)
	PREFETCHT0	12608(SI)
	VMOVDQU	(SI), Y0
	VMOVDQU	32(SI), Y1
	VMOVDQU	64(SI), Y2
	VMOVDQU	96(SI), Y3
	VMOVDQU	4096(SI), Y4
	VMOVDQU	4128(SI), Y5
	VMOVDQU	4160(SI), Y6
	VMOVDQU	4192(SI), Y7
	VMOVDQU	8192(SI), Y8
	VMOVDQU	8224(SI), Y9
	VMOVDQU	8256(SI), Y10
	VMOVDQU	8288(SI), Y11
	VMOVDQU	12288(SI), Y12
	VMOVDQU	12320(SI), Y13
	VMOVDQU	12352(SI), Y14
	VMOVDQU	12384(SI), Y15
	VMOVNTDQ	Y0, (DI)
	VMOVNTDQ	Y1, 32(DI)
	VMOVNTDQ	Y2, 64(DI)
	VMOVNTDQ	Y3, 96(DI)
	VMOVNTDQ	Y4, 4096(DI)
	VMOVNTDQ	Y5, 4128(DI)
	VMOVNTDQ	Y6, 4160(DI)
	VMOVNTDQ	Y7, 4192(DI)
	VMOVNTDQ	Y8, 8192(DI)
	VMOVNTDQ	Y9, 8224(DI)
	VMOVNTDQ	Y10, 8256(DI)
	VMOVNTDQ	Y11, 8288(DI)
	VMOVNTDQ	Y12, 12288(DI)
	VMOVNTDQ	Y13, 12320(DI)
	VMOVNTDQ	Y14, 12352(DI)
	VMOVNTDQ	Y15, 12384(DI)
	ADDQ	$128, SI
	ADDQ	$128, DI
	DECQ	R8
	JNZ	ntp_inner
	ADDQ	$12288, SI
	ADDQ	$12288, DI
	SUBQ	$16384, CX
	CMPQ	CX, $16384
	JAE	ntp_block
	SFENCE
	VZEROUPPER
ntp_rest:
	MOVQ	DI, dst+0(FP)
	MOVQ	SI, src+8(FP)
	MOVQ	CX, n+16(FP)
	JMP	·copyNT(SB)

// func copyRepMovsb(dst, src unsafe.Pointer, n uintptr)
TEXT ·copyRepMovsb(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	REP;	MOVSB
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL	leaf+0(FP), AX
	MOVL	sub+4(FP), CX
	CPUID
	MOVL	AX, a+8(FP)
	MOVL	BX, b+12(FP)
	MOVL	CX, c+16(FP)
	MOVL	DX, d+20(FP)
	RET
