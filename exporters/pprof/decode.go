package pprofexporter

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/pprof/profile"
)

// Profile and SampledProfile decode what the builder encodes (encode.go)
// here rather than with profile.ParseUncompressed, which allocated each
// sample, its location IDs, values, labels and label values apart (some
// seven allocations per sample: 70 000 for a profile of 10 000 sites, and
// most of its time). decodeProfile reads the encoding in a few passes: the
// first counts the messages and their repeated fields, so that samples,
// locations, lines, functions, their pointer lists, the location and value
// lists of every sample and the string table are each cut from one slice
// made to size. Label maps are shared: every sample of a kind has the same
// one label, so they share one map (see sharedLabels), where a map per
// sample (two allocations, 400 bytes) was still a third of the decoding.
//
// It reads only the fields encode.go lists, in the shapes the builder
// writes them (packed repeated fields; locations and functions numbered
// from 1 in the order they are encoded), and refuses anything else: it is
// the reader of this package's encoding, not of profile.proto at large.
// The profile it returns is the one profile.ParseUncompressed returns for
// the same bytes, field for exported field (TestDecodeMatchesParse).

var errEncoding = errors.New("not as the builder encodes profiles")

// fieldReader reads the fields of one message in turn: next moves to the
// next field, and sets field, wire, and v (a varint) or the bounds of msg
// (a length-delimited field's bytes).
//
// It keeps offsets into b rather than slices of it: next is called for
// every field of a profile (some 100 000 at 10 000 sites), through a
// pointer, and a slice stored through a pointer while the GC marks takes
// a write barrier (which was a third of next's time).
type fieldReader struct {
	b      []byte // the message
	at     int    // the offset of the next field
	field  int
	wire   int
	v      uint64
	ms, me int // msg's bounds
	err    error
}

// next reads the next field; false at the end of the message or on an
// error (in err).
func (r *fieldReader) next() bool {
	if r.at >= len(r.b) || r.err != nil {
		return false
	}
	b := r.b[r.at:]
	tag, n := readVarint(b)
	if n == 0 {
		return r.fail("truncated tag")
	}
	r.field, r.wire = int(tag>>3), int(tag&7)
	switch r.wire {
	case wireVarint:
		v, m := readVarint(b[n:])
		if m == 0 {
			return r.fail("truncated varint")
		}
		r.v = v
		r.at += n + m
	case wireBytes:
		l, m := readVarint(b[n:])
		if m == 0 || l > uint64(len(b)-n-m) {
			return r.fail("truncated field")
		}
		r.ms = r.at + n + m
		r.me = r.ms + int(l)
		r.at = r.me
	default:
		return r.fail("wire type " + fmt.Sprint(r.wire))
	}
	return true
}

// msg returns the bytes of the length-delimited field read.
func (r *fieldReader) msg() []byte { return r.b[r.ms:r.me] }

func (r *fieldReader) fail(why string) bool {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errEncoding, why)
	}
	return false
}

// want checks that the current field has wire type wire.
func (r *fieldReader) want(wire int) bool {
	if r.wire != wire {
		return r.fail(fmt.Sprintf("field %d of wire type %d", r.field, r.wire))
	}
	return true
}

// unexpected fails on the current field, which the builder never writes
// in the message being read.
func (r *fieldReader) unexpected(msg string) bool {
	return r.fail(fmt.Sprintf("field %d in a %s", r.field, msg))
}

// readVarint returns the varint at the start of b and its length; 0 if b
// holds none.
func readVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// countVarints returns how many varints the packed field b holds.
func countVarints(b []byte) int {
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// profileSizes counts what a profile holds, so that decodeProfile makes
// each of its slices once.
type profileSizes struct {
	sampleTypes, comments int
	samples, locIDs       int // samples, and location IDs in all of them
	values                int // values in all samples
	locs, lines, funcs    int
	strs, strBytes        int // string table entries and their bytes
	// strsAt is the offset of the first string table entry: the builder
	// encodes the table last, so that readStrings skips the samples.
	strsAt int
}

// count returns the sizes of the profile encoded in data.
func count(data []byte) (profileSizes, error) {
	var n profileSizes
	r := fieldReader{b: data}
	// at is the offset of the field read.
	for at := 0; r.next(); at = r.at {
		switch r.field {
		case fProfileSampleType:
			if r.want(wireBytes) {
				n.sampleTypes++
			}
		case fProfileSample:
			if !r.want(wireBytes) {
				break
			}
			n.samples++
			s := fieldReader{b: r.msg()}
			for s.next() {
				switch s.field {
				case fSampleLocationID:
					if s.want(wireBytes) {
						n.locIDs += countVarints(s.msg())
					}
				case fSampleValue:
					if s.want(wireBytes) {
						n.values += countVarints(s.msg())
					}
				case fSampleLabel:
					s.want(wireBytes)
				default:
					s.unexpected("sample")
				}
			}
			r.err = s.err
		case fProfileLocation:
			if !r.want(wireBytes) {
				break
			}
			n.locs++
			l := fieldReader{b: r.msg()}
			for l.next() {
				if l.field == fLocationLine {
					n.lines++
				}
			}
			r.err = l.err
		case fProfileFunction:
			if r.want(wireBytes) {
				n.funcs++
			}
		case fProfileStringTable:
			if r.want(wireBytes) {
				if n.strs == 0 {
					n.strsAt = at
				}
				n.strs++
				n.strBytes += len(r.msg())
			}
		case fProfileComment:
			if r.want(wireVarint) {
				n.comments++
			}
		case fProfileTimeNanos, fProfileDefaultSampleType:
			r.want(wireVarint)
		default:
			r.unexpected("profile")
		}
	}
	return n, r.err
}

// decodeProfile decodes the profile encoded in data (uncompressed), as
// profile.ParseUncompressed would.
func decodeProfile(data []byte) (*profile.Profile, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no data", errEncoding)
	}
	n, err := count(data)
	if err != nil {
		return nil, err
	}
	d := decoder{
		strs: make([]string, 0, n.strs),
		p: &profile.Profile{
			// As ParseUncompressed leaves it: a profile without a
			// period type gets an empty one.
			PeriodType: &profile.ValueType{},
		},
		sampleTypes: make([]profile.ValueType, n.sampleTypes),
		samples:     make([]profile.Sample, n.samples),
		// Never nil, as ParseUncompressed's: a sample without
		// locations has an empty list, not a nil one.
		locIDs: make([]*profile.Location, n.locIDs),
		values: make([]int64, n.values),
		locs:   make([]profile.Location, n.locs),
		lines:  make([]profile.Line, n.lines),
		funcs:  make([]profile.Function, n.funcs),
	}
	d.readStrings(data[n.strsAt:], n.strBytes)
	if len(d.strs) == 0 || d.strs[0] != "" {
		// As ParseUncompressed: string 0 is the empty string, which
		// every unset string field refers to.
		return nil, fmt.Errorf("%w: string table without the empty string first", errEncoding)
	}
	p := d.p
	if n.sampleTypes > 0 {
		p.SampleType = make([]*profile.ValueType, 0, n.sampleTypes)
	}
	if n.samples > 0 {
		p.Sample = make([]*profile.Sample, 0, n.samples)
	}
	if n.locs > 0 {
		p.Location = make([]*profile.Location, 0, n.locs)
	}
	if n.funcs > 0 {
		p.Function = make([]*profile.Function, 0, n.funcs)
	}
	if n.comments > 0 {
		p.Comments = make([]string, 0, n.comments)
	}
	r := fieldReader{b: data}
	for r.next() {
		switch r.field {
		case fProfileSampleType:
			vt := &d.sampleTypes[len(p.SampleType)]
			vt.Type, vt.Unit = d.valueType(r.msg())
			p.SampleType = append(p.SampleType, vt)
		case fProfileSample:
			p.Sample = append(p.Sample, d.sample(r.msg()))
		case fProfileLocation:
			p.Location = append(p.Location, d.location(r.msg()))
		case fProfileFunction:
			p.Function = append(p.Function, d.function(r.msg()))
		case fProfileTimeNanos:
			p.TimeNanos = int64(r.v)
		case fProfileComment:
			p.Comments = append(p.Comments, d.str(r.v))
		case fProfileDefaultSampleType:
			p.DefaultSampleType = d.str(r.v)
		}
	}
	if err := errors.Join(r.err, d.err); err != nil {
		return nil, err
	}
	return p, nil
}

// decoder holds the slices a profile's messages are cut from, each made
// to size by count, and the string table.
type decoder struct {
	p    *profile.Profile
	strs []string

	sampleTypes []profile.ValueType
	samples     []profile.Sample
	locIDs      []*profile.Location // the samples' location lists
	values      []int64             // the samples' values
	// The label maps shared by samples (sharedLabels).
	labelSets  [maxLabelSets]labelSet
	nLabelSets int
	locs       []profile.Location
	lines      []profile.Line
	funcs      []profile.Function

	// Read so far: samples, location IDs, values, locations, lines,
	// functions.
	nSamples, nLocIDs, nValues, nLocs, nLines, nFuncs int

	// The first error, which decodeProfile returns instead of the
	// profile (what follows it is read, to no use).
	err error
}

// readStrings reads the string table of data (from its first entry on),
// strBytes long in all, into d.strs: the strings share one allocation.
func (d *decoder) readStrings(data []byte, strBytes int) {
	var sb strings.Builder
	sb.Grow(strBytes)
	r := fieldReader{b: data}
	for r.next() {
		if r.field == fProfileStringTable {
			sb.Write(r.msg())
		}
	}
	all, at := sb.String(), 0
	r = fieldReader{b: data}
	for r.next() {
		if r.field == fProfileStringTable {
			d.strs = append(d.strs, all[at:at+len(r.msg())])
			at += len(r.msg())
		}
	}
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// str returns string table entry i.
func (d *decoder) str(i uint64) string {
	if i >= uint64(len(d.strs)) {
		d.fail(fmt.Errorf("%w: string %d of %d", errEncoding, i, len(d.strs)))
		return ""
	}
	return d.strs[i]
}

// valueType returns the type and unit of a ValueType message.
func (d *decoder) valueType(msg []byte) (typ, unit string) {
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fValueTypeType:
			r.want(wireVarint)
			typ = d.str(r.v)
		case fValueTypeUnit:
			r.want(wireVarint)
			unit = d.str(r.v)
		default:
			r.unexpected("value type")
		}
	}
	d.fail(r.err)
	return typ, unit
}

// sample decodes a Sample message.
func (d *decoder) sample(msg []byte) *profile.Sample {
	s := &d.samples[d.nSamples]
	d.nSamples++
	locStart, valStart := d.nLocIDs, d.nValues
	var label []byte // the last Label message
	nLabels := 0
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fSampleLocationID:
			// Every location of every sample (some 300 000 in a profile
			// of 10 000 sites) goes through here: the location is found
			// by its ID inline (the builder numbers them from 1 in the
			// order it encodes them, which location checks; ID 0 wraps
			// around and fails).
			locs, k := d.locs, d.nLocIDs
			for b := r.msg(); len(b) > 0; {
				id, n := readVarint(b)
				if n == 0 {
					r.fail("truncated location IDs")
					break
				}
				if id-1 >= uint64(len(locs)) {
					d.failID("location", id, len(locs))
					break
				}
				d.locIDs[k] = &locs[id-1]
				k++
				b = b[n:]
			}
			d.nLocIDs = k
		case fSampleValue:
			for b := r.msg(); len(b) > 0; {
				v, n := readVarint(b)
				if n == 0 {
					r.fail("truncated values")
					break
				}
				d.values[d.nValues] = int64(v)
				d.nValues++
				b = b[n:]
			}
		case fSampleLabel:
			label = r.msg()
			nLabels++
		}
	}
	d.fail(r.err)
	switch {
	case nLabels == 1:
		s.Label = d.sharedLabels(label)
	case nLabels > 1: // never ours: a map of the sample's own
		for r = (fieldReader{b: msg}); r.next(); {
			if r.field != fSampleLabel {
				continue
			}
			if k, v := d.labelIndexes(r.msg()); v != 0 {
				if s.Label == nil {
					s.Label = make(map[string][]string, nLabels)
				}
				s.Label[d.str(k)] = append(s.Label[d.str(k)], d.str(v))
			}
		}
	}
	// Capped, so that appending to one sample's list cannot write over
	// the next one's.
	s.Location = d.locIDs[locStart:d.nLocIDs:d.nLocIDs]
	if d.nValues > valStart {
		s.Value = d.values[valStart:d.nValues:d.nValues]
	}
	return s
}

// maxLabelSets bounds the label maps a profile's samples share: the
// builder's samples have one label, the kind, of two values.
const maxLabelSets = 8

// labelSet is a label map that samples share, and the one label it holds:
// its Label message, and its key and value as string table indexes.
type labelSet struct {
	msg      []byte // the Label message, as encoded
	key, str uint64
	m        map[string][]string
}

// sharedLabels returns the Label map of a sample whose only label is the
// Label message msg: one map for every sample with that label (nil if it
// has no string value, as ParseUncompressed leaves out a numeric label).
// Profile's documentation says so: a caller that changes one sample's
// labels gives it a map of its own. The maps are this profile's, made
// anew by each decoding, so profiles built at once share nothing.
func (d *decoder) sharedLabels(msg []byte) map[string][]string {
	// The builder encodes a kind's label once and copies it into each
	// sample: the bytes find the map without reading the fields.
	for i := range d.nLabelSets {
		if ls := &d.labelSets[i]; string(ls.msg) == string(msg) {
			return ls.m
		}
	}
	key, str := d.labelIndexes(msg)
	if str == 0 {
		return nil
	}
	for i := range d.nLabelSets {
		if ls := &d.labelSets[i]; ls.key == key && ls.str == str {
			return ls.m
		}
	}
	m := map[string][]string{d.str(key): {d.str(str)}}
	if d.nLabelSets < maxLabelSets {
		d.labelSets[d.nLabelSets] = labelSet{msg, key, str, m}
		d.nLabelSets++
	}
	return m
}

// labelIndexes returns the string table indexes of a Label message's key
// and string value.
func (d *decoder) labelIndexes(msg []byte) (key, str uint64) {
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fLabelKey:
			r.want(wireVarint)
			key = r.v
		case fLabelStr:
			r.want(wireVarint)
			str = r.v
		default:
			r.unexpected("label")
		}
	}
	d.fail(r.err)
	return key, str
}

// failID fails on a reference to what, numbered id, of which there are n.
func (d *decoder) failID(what string, id uint64, n int) {
	d.fail(fmt.Errorf("%w: %s %d of %d", errEncoding, what, id, n))
}

// functionByID returns function id (0: none): the builder numbers
// functions from 1 in the order it encodes them, which function checks.
func (d *decoder) functionByID(id uint64) *profile.Function {
	if id == 0 {
		return nil
	}
	if id > uint64(len(d.funcs)) {
		d.failID("function", id, len(d.funcs))
		return nil
	}
	return &d.funcs[id-1]
}

// location decodes a Location message.
func (d *decoder) location(msg []byte) *profile.Location {
	l := &d.locs[d.nLocs]
	d.nLocs++
	lineStart := d.nLines
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fLocationID:
			r.want(wireVarint)
			l.ID = r.v
		case fLocationAddress:
			r.want(wireVarint)
			l.Address = r.v
		case fLocationLine:
			if !r.want(wireBytes) {
				break
			}
			d.line(&d.lines[d.nLines], r.msg())
			d.nLines++
		default:
			r.unexpected("location")
		}
	}
	d.fail(r.err)
	if l.ID != uint64(d.nLocs) {
		d.fail(fmt.Errorf("%w: location %d numbered %d", errEncoding, d.nLocs, l.ID))
	}
	if d.nLines > lineStart {
		l.Line = d.lines[lineStart:d.nLines:d.nLines]
	}
	return l
}

// line decodes a Line message into ln.
func (d *decoder) line(ln *profile.Line, msg []byte) {
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fLineFunctionID:
			r.want(wireVarint)
			ln.Function = d.functionByID(r.v)
		case fLineLine:
			r.want(wireVarint)
			ln.Line = int64(r.v)
		default:
			r.unexpected("line")
		}
	}
	d.fail(r.err)
}

// function decodes a Function message.
func (d *decoder) function(msg []byte) *profile.Function {
	f := &d.funcs[d.nFuncs]
	d.nFuncs++
	r := fieldReader{b: msg}
	for r.next() {
		switch r.field {
		case fFunctionID:
			r.want(wireVarint)
			f.ID = r.v
		case fFunctionName:
			r.want(wireVarint)
			f.Name = d.str(r.v)
		case fFunctionSystemName:
			r.want(wireVarint)
			f.SystemName = d.str(r.v)
		case fFunctionFilename:
			r.want(wireVarint)
			f.Filename = d.str(r.v)
		default:
			r.unexpected("function")
		}
	}
	d.fail(r.err)
	if f.ID != uint64(d.nFuncs) {
		d.fail(fmt.Errorf("%w: function %d numbered %d", errEncoding, d.nFuncs, f.ID))
	}
	return f
}
