#include "textflag.h"

// func getfp() unsafe.Pointer
// Returns the frame pointer register as it is on entry: the frame pointer
// of whichever frame called this function (an ABI wrapper or the Go caller;
// calibrate finds out which).
TEXT ·getfp(SB),NOSPLIT|NOFRAME,$0-8
	MOVQ BP, ret+0(FP)
	RET
