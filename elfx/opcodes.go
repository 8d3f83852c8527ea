package elfx

// Call-frame instructions (DWARF 5 §6.4.2, DW_CFA_*). The first three
// carry an operand in their low 6 bits; match them on op&0xc0.
const (
	CFAAdvanceLoc        = 0x40
	CFAOffset            = 0x80
	CFARestore           = 0xc0
	CFANop               = 0x00
	CFASetLoc            = 0x01
	CFAAdvanceLoc1       = 0x02
	CFAAdvanceLoc2       = 0x03
	CFAAdvanceLoc4       = 0x04
	CFAOffsetExtended    = 0x05
	CFARestoreExtended   = 0x06
	CFAUndefined         = 0x07
	CFASameValue         = 0x08
	CFARegister          = 0x09
	CFARememberState     = 0x0a
	CFARestoreState      = 0x0b
	CFADefCFA            = 0x0c
	CFADefCFARegister    = 0x0d
	CFADefCFAOffset      = 0x0e
	CFADefCFAExpression  = 0x0f
	CFAExpression        = 0x10
	CFAOffsetExtendedSF  = 0x11
	CFADefCFASF          = 0x12
	CFADefCFAOffsetSF    = 0x13
	CFAValOffset         = 0x14
	CFAValOffsetSF       = 0x15
	CFAValExpression     = 0x16
	CFAGNUArgsSize       = 0x2e
	CFAGNUNegOffsetExtSF = 0x2f
)

// DWARF expression operations (DWARF 5 §2.5, DW_OP_*) that unwinding
// rules use.
const (
	OpAddr       = 0x03
	OpDeref      = 0x06
	OpConst1u    = 0x08
	OpConst1s    = 0x09
	OpConst2u    = 0x0a
	OpConst2s    = 0x0b
	OpConst4u    = 0x0c
	OpConst4s    = 0x0d
	OpConst8u    = 0x0e
	OpConst8s    = 0x0f
	OpConstu     = 0x10
	OpConsts     = 0x11
	OpDup        = 0x12
	OpDrop       = 0x13
	OpOver       = 0x14
	OpPick       = 0x15
	OpSwap       = 0x16
	OpRot        = 0x17
	OpAbs        = 0x19
	OpAnd        = 0x1a
	OpDiv        = 0x1b
	OpMinus      = 0x1c
	OpMod        = 0x1d
	OpMul        = 0x1e
	OpNeg        = 0x1f
	OpNot        = 0x20
	OpOr         = 0x21
	OpPlus       = 0x22
	OpPlusUconst = 0x23
	OpShl        = 0x24
	OpShr        = 0x25
	OpShra       = 0x26
	OpXor        = 0x27
	OpBra        = 0x28
	OpEq         = 0x29
	OpGe         = 0x2a
	OpGt         = 0x2b
	OpLe         = 0x2c
	OpLt         = 0x2d
	OpNe         = 0x2e
	OpSkip       = 0x2f
	OpLit0       = 0x30
	OpLit31      = 0x4f
	OpReg0       = 0x50
	OpReg31      = 0x6f
	OpBreg0      = 0x70
	OpBreg31     = 0x8f
	OpRegx       = 0x90
	OpFbreg      = 0x91
	OpBregx      = 0x92
	OpNop        = 0x96
)
