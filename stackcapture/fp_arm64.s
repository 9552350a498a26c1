#include "textflag.h"

// func getfp() unsafe.Pointer
// Returns the frame pointer register (R29) as it is on entry.
TEXT ·getfp(SB),NOSPLIT|NOFRAME,$0-8
	MOVD R29, ret+0(FP)
	RET
