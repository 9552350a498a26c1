package pprofexporter

import "math/bits"

// The profile is encoded here, straight from the ledger's entries, rather
// than built as a profile.Profile and encoded by its Write: that made
// every location, line, function and sample a Go value, then walked them
// all again to build the string table and encode them, which cost more
// than reading the ledger (a profile of 1 000 sites: 1.6 ms, of which the
// profile package's encoding and its garbage were over half). Profile and
// SampledProfile, which return a profile.Profile, decode what is encoded
// here (decode.go), so there is one way a profile is made.
//
// The messages and field numbers are those of profile.proto
// (github.com/google/pprof/proto/profile.proto):
//
//	Profile:   1 sample_type, 2 sample, 4 location, 5 function,
//	           6 string_table, 9 time_nanos, 13 comment, 14 default_sample_type
//	ValueType: 1 type, 2 unit (string table indexes)
//	Sample:    1 location_id (packed), 2 value (packed), 3 label
//	Label:     1 key, 2 str (string table indexes)
//	Location:  1 id, 3 address, 4 line
//	Line:      1 function_id, 2 line
//	Function:  1 id, 2 name, 3 system_name, 4 filename (string table indexes)
//
// No mappings: the profile holds code locations only, as Profile says.

// Field numbers of profile.proto.
const (
	fProfileSampleType        = 1
	fProfileSample            = 2
	fProfileLocation          = 4
	fProfileFunction          = 5
	fProfileStringTable       = 6
	fProfileTimeNanos         = 9
	fProfileComment           = 13
	fProfileDefaultSampleType = 14

	fValueTypeType = 1
	fValueTypeUnit = 2

	fSampleLocationID = 1
	fSampleValue      = 2
	fSampleLabel      = 3

	fLabelKey = 1
	fLabelStr = 2

	fLocationID      = 1
	fLocationAddress = 3
	fLocationLine    = 4

	fLineFunctionID = 1
	fLineLine       = 2

	fFunctionID         = 1
	fFunctionName       = 2
	fFunctionSystemName = 3
	fFunctionFilename   = 4
)

// Wire types.
const (
	wireVarint = 0
	wireBytes  = 2
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// varintLen is the length of v's varint encoding.
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func appendTag(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

// appendUint appends a varint field; zero, the default, is left out, as
// proto3 encoders do.
func appendUint(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, field, wireVarint), v)
}

// appendInt appends an int64 field (negative values as ten-byte varints,
// as protobuf encodes int64).
func appendInt(b []byte, field int, v int64) []byte { return appendUint(b, field, uint64(v)) }

// appendBytes appends a length-delimited field holding msg: an embedded
// message, or a string (even an empty one: the string table's first entry
// is the empty string, and must be there).
func appendBytes[T ~[]byte | ~string](b []byte, field int, msg T) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(msg)))
	return append(b, msg...)
}

// appendPacked appends a packed repeated varint field; nothing if vs is
// empty.
func appendPacked[T uint64 | int64](b []byte, field int, vs []T) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		n += varintLen(uint64(v))
	}
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(n))
	for _, v := range vs {
		b = appendVarint(b, uint64(v))
	}
	return b
}
