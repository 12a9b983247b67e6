#include "textflag.h"

// func userCopy(dst *byte, src uintptr, n uintptr)
TEXT ·userCopy(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	CLD
	REP;	MOVSB
	RET
