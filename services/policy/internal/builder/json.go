package builder

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// This file is a small, strict JSON reader. It exists instead of encoding/json for three
// reasons that all come from checking the platform's JSON *as the platform will read it*:
//
//   - Duplicate keys. encoding/json silently keeps the last one; other readers (serde derive,
//     hand-written walks) may see the first or fail. A document whose meaning depends on the
//     reader is refused, so the walk can never judge a different document than the one that runs.
//   - NUL characters. The platform strips U+0000 before storing a value (Postgres jsonb cannot
//     hold it), so "inline\u0000Script" is stored as "inlineScript". Refusing NUL means the
//     stored document is the checked one. Lone UTF-16 surrogates are refused for the same
//     reason: readers disagree on them. Invalid UTF-8 is refused outright.
//   - Bounded, cheap work. Nesting depth is checked while reading, before descending (see
//     enter), and the tree is a flat array of 12-byte nodes over the source string, so a
//     10k-step flow is parsed without a per-value allocation.
//
// For the same first reason it refuses a number beyond a 64-bit float's range, which fits the
// JSON grammar but which readers disagree on (see number).

type kind uint8

const (
	kNull kind = iota
	kFalse
	kTrue
	kNumber
	kString
	kArray
	kObject
)

// node is one JSON value. For strings (span inside the quotes) and numbers, a:b is a byte span
// of doc.src. For arrays and objects, a is the index of the first member in doc.members and b
// the member count.
type node struct {
	kind kind
	esc  bool // string contains a backslash escape; decode before use
	a, b int32
	// up is the containing array or object (-1 for the root) and at the member index in it:
	// enough to render a node's JSON pointer on demand, so a walk never builds one it does not
	// return (see Pointer).
	up, at int32
}

// member is one array element (key unused) or object member.
type member struct {
	ka, kb int32 // key span inside the quotes
	kesc   bool
	val    int32 // node index
}

type doc struct {
	name    Doc
	src     string
	nodes   []node
	members []member
	bufs    *treeBufs // where nodes and members came from, for release
}

const root int32 = 0

// parseDoc checks limits and syntax and builds the tree. Every failure is an *InputError.
func parseDoc(raw []byte, name Doc, lim Limits) (*doc, error) {
	if len(raw) > lim.MaxBytes {
		return nil, &InputError{Doc: name, Rule: fmt.Sprintf("document is %d bytes, the limit is %d", len(raw), lim.MaxBytes), Limit: true}
	}
	// The copy is deliberate: every string the reports return is a substring of src, and they
	// must not change if the caller reuses raw afterwards.
	return parseDocString(string(raw), name, lim)
}

// parseDocString is parseDoc over a string, which is immutable, so it is used as is: no copy
// (a 2 MB flow arriving as a protobuf string field was copied twice on its way to the parser).
func parseDocString(src string, name Doc, lim Limits) (*doc, error) {
	if len(src) > lim.MaxBytes {
		return nil, &InputError{Doc: name, Rule: fmt.Sprintf("document is %d bytes, the limit is %d", len(src), lim.MaxBytes), Limit: true}
	}
	if !utf8.ValidString(src) {
		return nil, &InputError{Doc: name, Rule: "document is not valid UTF-8"}
	}
	bufs, ok := treePool.Get().(*treeBufs)
	if !ok { // the pool's New makes only *treeBufs
		bufs = &treeBufs{}
	}
	// A rough size guess (one node per ~12 source bytes) saves most regrowth.
	if n := len(src)/12 + 1; cap(bufs.nodes) < n {
		bufs.nodes = make([]node, 0, n)
	}
	if n := len(src)/14 + 1; cap(bufs.members) < n {
		bufs.members = make([]member, 0, n)
	}
	p := parser{
		src:      src,
		maxDepth: lim.MaxJSONDepth,
		d:        &doc{name: name, nodes: bufs.nodes[:0], members: bufs.members[:0], bufs: bufs},
		scratch:  bufs.scratch[:0],
	}
	p.d.src = p.src
	p.maxKey = lim.MaxKeyBytes
	p.skipWS()
	err := p.value()
	if err == nil {
		p.d.nodes[root].up = -1
	}
	if err == nil {
		p.skipWS()
		if p.pos != len(p.src) {
			err = p.fail("unexpected data after the JSON value")
		}
	}
	bufs.scratch = p.scratch[:0]
	if err != nil {
		p.d.release()
		return nil, err
	}
	return p.d, nil
}

// treeBufs are the tree arrays of one parse, pooled because a busy service parses documents of
// similar size back to back: reusing them saves allocating and zeroing megabytes per request.
// Nothing in a report points into them (reports hold strings of doc.src), so they are returned
// to the pool as soon as the walk ends.
type treeBufs struct {
	nodes   []node
	members []member
	scratch []member
}

var treePool = sync.Pool{New: func() any { return new(treeBufs) }}

// maxPooledNodes keeps one oversized document from pinning its arrays in the pool forever.
const maxPooledNodes = 1 << 20

// release hands the tree arrays back; the doc must not be used afterwards.
func (d *doc) release() {
	b := d.bufs
	if b == nil {
		return
	}
	b.nodes, b.members = d.nodes[:0], d.members[:0]
	d.bufs, d.nodes, d.members = nil, nil, nil
	if cap(b.nodes) > maxPooledNodes || cap(b.members) > maxPooledNodes {
		return
	}
	treePool.Put(b)
}

type parser struct {
	src      string
	pos      int
	depth    int
	maxDepth int
	maxKey   int
	d        *doc
	scratch  []member // members of the containers currently open, innermost last
	big      []bigSet // key sets of the large objects currently open, innermost last
}

func (p *parser) fail(format string, args ...any) *InputError {
	return &InputError{Doc: p.d.name, Rule: fmt.Sprintf("malformed JSON at byte %d: %s", p.pos, fmt.Sprintf(format, args...))}
}

func (p *parser) skipWS() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) newNode(k kind) int32 {
	p.d.nodes = append(p.d.nodes, node{kind: k})
	return int32(len(p.d.nodes) - 1)
}

func (p *parser) value() error {
	if p.pos >= len(p.src) {
		return p.fail("unexpected end of input")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		a, b, esc, err := p.str()
		if err != nil {
			return err
		}
		i := p.newNode(kString)
		p.d.nodes[i].a, p.d.nodes[i].b, p.d.nodes[i].esc = a, b, esc
		return nil
	case c == 't':
		return p.literal("true", kTrue)
	case c == 'f':
		return p.literal("false", kFalse)
	case c == 'n':
		return p.literal("null", kNull)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return p.fail("unexpected character %q", c)
	}
}

func (p *parser) literal(word string, k kind) error {
	if !strings.HasPrefix(p.src[p.pos:], word) {
		return p.fail("invalid literal")
	}
	p.pos += len(word)
	p.newNode(k)
	return nil
}

func (p *parser) number() error {
	start := p.pos
	s := p.src
	i := p.pos
	if i < len(s) && s[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i, _ = digits(s, i)
	default:
		p.pos = i
		return p.fail("invalid number")
	}
	intDigits := i - intStart
	ok, exp := true, false
	if i < len(s) && s[i] == '.' {
		i, ok = digits(s, i+1)
	}
	if ok && i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		exp = true
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		i, ok = digits(s, i)
	}
	p.pos = i
	if !ok {
		return p.fail("invalid number")
	}
	// A number beyond a 64-bit float's range means different things to different readers:
	// serde_json's Value (the platform's) and encoding/json refuse it ("number out of range"),
	// a raw-value skip or a Postgres numeric keeps it. Which document runs would depend on the
	// reader, so it is refused. Without an exponent, at most 308 integer digits are below 1e308
	// and cannot overflow, so only the rare rest is converted. A number too small to represent
	// reads as 0 in every float reader and is accepted, as they accept it.
	if exp || intDigits > 308 {
		if _, err := strconv.ParseFloat(s[start:i], 64); err != nil {
			p.pos = start
			return p.fail("number out of range: beyond a 64-bit float (about ±1.8e308)")
		}
	}
	n := p.newNode(kNumber)
	p.d.nodes[n].a, p.d.nodes[n].b = int32(start), int32(i)
	return nil
}

// digits skips the run of digits at s[i:]; false when there is not one.
func digits(s string, i int) (int, bool) {
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return j, j > i
}

// str scans a string starting at the opening quote and returns the span inside the quotes.
// It validates every escape, refusing NUL and lone surrogates (see the file comment).
func (p *parser) str() (int32, int32, bool, error) {
	s := p.src
	i := p.pos + 1
	start := i
	esc := false
	for {
		if i >= len(s) {
			p.pos = i
			return 0, 0, false, p.fail("unterminated string")
		}
		c := s[i]
		if !strSpecial[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			p.pos = i + 1
			return int32(start), int32(i), esc, nil
		case c < 0x20:
			p.pos = i
			return 0, 0, false, p.fail("control character in string")
		}
		esc = true
		if i+1 >= len(s) {
			p.pos = i
			return 0, 0, false, p.fail("unterminated escape")
		}
		switch s[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				p.pos = i
				return 0, 0, false, p.fail("invalid \\u escape")
			}
			switch {
			case r == 0:
				p.pos = i
				return 0, 0, false, p.fail("NUL character (\\u0000) is not accepted: the platform strips it before storing")
			case r >= 0xDC00 && r <= 0xDFFF:
				p.pos = i
				return 0, 0, false, p.fail("lone low surrogate")
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
					lo, ok = hex4(s, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					p.pos = i
					return 0, 0, false, p.fail("lone high surrogate")
				}
				i += 12
			default:
				i += 6
			}
		default:
			p.pos = i
			return 0, 0, false, p.fail("invalid escape")
		}
	}
}

// strSpecial marks the bytes that end the fast path of a string scan.
var strSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// enter is the depth bound. It runs before a container's members are parsed, so the parser's
// recursion (and every later walk over the tree, which recurses at most as deep as the tree)
// never exceeds MaxJSONDepth frames, itself capped at hardMaxJSONDepth: deep input is refused
// as it is read, never by running out of stack.
func (p *parser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		e := p.fail("nesting deeper than %d", p.maxDepth)
		e.Limit = true
		return e
	}
	return nil
}

// close moves the members collected since start into the shared members array.
func (p *parser) close(n int32, start int) {
	first := len(p.d.members)
	p.d.members = append(p.d.members, p.scratch[start:]...)
	p.d.nodes[n].a = int32(first)
	p.d.nodes[n].b = int32(len(p.scratch) - start)
	p.scratch = p.scratch[:start]
	if k := len(p.big); k > 0 && p.big[k-1].start == start {
		p.big = p.big[:k-1]
	}
	p.depth--
}

// open starts a container of kind k at its opening byte; empty: it closed at once on end.
func (p *parser) open(k kind, end byte) (n int32, start int, empty bool, err error) {
	if err := p.enter(); err != nil {
		return 0, 0, false, err
	}
	n = p.newNode(k)
	p.pos++ // [ or {
	start = len(p.scratch)
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == end {
		p.pos++
		p.close(n, start)
		return n, start, true, nil
	}
	return n, start, false, nil
}

// element parses the next value of container n, after any white space, and records where it
// stands in n.
func (p *parser) element(n int32, start int) (int32, error) {
	p.skipWS()
	v := int32(len(p.d.nodes))
	if err := p.value(); err != nil {
		return 0, err
	}
	p.d.nodes[v].up, p.d.nodes[v].at = n, int32(len(p.scratch)-start)
	return v, nil
}

// next reads what follows a member of container n (what: "array" or "object"): a comma, more
// to come; or end, and n is closed.
func (p *parser) next(n int32, start int, end byte, what string) (more bool, err error) {
	p.skipWS()
	if p.pos >= len(p.src) {
		return false, p.fail("unterminated %s", what)
	}
	switch p.src[p.pos] {
	case ',':
		p.pos++
		return true, nil
	case end:
		p.pos++
		p.close(n, start)
		return false, nil
	}
	return false, p.fail("expected , or %c in %s", end, what)
}

func (p *parser) array() error {
	n, start, empty, err := p.open(kArray, ']')
	if err != nil || empty {
		return err
	}
	for {
		v, err := p.element(n, start)
		if err != nil {
			return err
		}
		p.scratch = append(p.scratch, member{val: v})
		if more, err := p.next(n, start, ']', "array"); !more {
			return err
		}
	}
}

func (p *parser) object() error {
	n, start, empty, err := p.open(kObject, '}')
	if err != nil || empty {
		return err
	}
	for {
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return p.fail("expected a string key")
		}
		keyPos := p.pos
		ka, kb, kesc, err := p.str()
		if err != nil {
			return err
		}
		if int(kb-ka) > p.maxKey {
			p.pos = keyPos
			e := p.fail("object key of %d bytes, the limit is %d", kb-ka, p.maxKey)
			e.Limit = true
			return e
		}
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return p.fail("expected : after key")
		}
		p.pos++
		v, err := p.element(n, start)
		if err != nil {
			return err
		}
		m := member{ka: ka, kb: kb, kesc: kesc, val: v}
		if p.duplicate(p.scratch[start:], m) {
			p.pos = keyPos
			return p.fail("duplicate key %q: readers disagree on which one counts", p.d.key(m))
		}
		p.scratch = append(p.scratch, m)
		if more, err := p.next(n, start, '}', "object"); !more {
			return err
		}
	}
}

// duplicate reports whether m's key already occurs in prev. Linear, because real objects are
// small; a huge object (a big static input) pays O(n^2) only up to the size limit, and the
// common unescaped case compares substrings without allocating.
func (p *parser) duplicate(prev []member, m member) bool {
	if len(prev) > 32 {
		return p.duplicateLarge(prev, m)
	}
	k := p.d.key(m)
	n := m.kb - m.ka
	for _, o := range prev {
		if !o.kesc && !m.kesc {
			// Length and first byte reject almost every pair before a comparison.
			if o.kb-o.ka == n && (n == 0 || p.src[o.ka] == p.src[m.ka]) && p.src[o.ka:o.kb] == p.src[m.ka:m.kb] {
				return true
			}
			continue
		}
		if p.d.key(o) == k {
			return true
		}
	}
	return false
}

// duplicateLarge keeps a key set for each large open object, built once when the object grows
// past the linear threshold and dropped when it closes. Objects nest LIFO, so a stack suffices.
func (p *parser) duplicateLarge(prev []member, m member) bool {
	start := len(p.scratch) - len(prev)
	if n := len(p.big); n == 0 || p.big[n-1].start != start {
		set := make(map[string]struct{}, len(prev)*2)
		for _, o := range prev {
			set[p.d.key(o)] = struct{}{}
		}
		p.big = append(p.big, bigSet{start: start, keys: set})
	}
	set := p.big[len(p.big)-1].keys
	k := p.d.key(m)
	if _, ok := set[k]; ok {
		return true
	}
	set[k] = struct{}{}
	return false
}

type bigSet struct {
	start int
	keys  map[string]struct{}
}

// --- accessors -------------------------------------------------------------------------------

func (d *doc) kindOf(i int32) kind { return d.nodes[i].kind }

func (d *doc) isNull(i int32) bool { return d.nodes[i].kind == kNull }

// elems returns the members of an array or object node.
func (d *doc) elems(i int32) []member {
	n := d.nodes[i]
	if n.kind != kArray && n.kind != kObject {
		return nil
	}
	return d.members[n.a : n.a+n.b]
}

// key returns a member's decoded key.
func (d *doc) key(m member) string {
	if !m.kesc {
		return d.src[m.ka:m.kb]
	}
	return unescape(d.src[m.ka:m.kb])
}

// str returns a string node's decoded value.
func (d *doc) str(i int32) string {
	n := d.nodes[i]
	if !n.esc {
		return d.src[n.a:n.b]
	}
	return unescape(d.src[n.a:n.b])
}

// keyIs compares a member key with a plain ASCII name without decoding in the common case.
func (d *doc) keyIs(m member, name string) bool {
	if !m.kesc {
		return d.src[m.ka:m.kb] == name
	}
	return unescape(d.src[m.ka:m.kb]) == name
}

// get returns the value of the member named key, if the node is an object that has it. Keys are
// unique (duplicates are refused), so the first match is the only one.
func (d *doc) get(obj int32, key string) (int32, bool) {
	if d.nodes[obj].kind != kObject {
		return 0, false
	}
	for _, m := range d.elems(obj) {
		if d.keyIs(m, key) {
			return m.val, true
		}
	}
	return 0, false
}

// member is get returning the whole member, for callers that push it onto a path.
func (d *doc) member(obj int32, key string) (member, bool) {
	if d.nodes[obj].kind != kObject {
		return member{}, false
	}
	for _, m := range d.elems(obj) {
		if d.keyIs(m, key) {
			return m, true
		}
	}
	return member{}, false
}

// getNonNull is get that treats an explicit null as absent, the way the platform's Option
// fields do.
func (d *doc) getNonNull(obj int32, key string) (int32, bool) {
	v, ok := d.get(obj, key)
	if !ok || d.isNull(v) {
		return 0, false
	}
	return v, true
}

// stringAt returns the decoded string at key when it is a string.
func (d *doc) stringAt(obj int32, key string) (string, bool) {
	v, ok := d.get(obj, key)
	if !ok || d.nodes[v].kind != kString {
		return "", false
	}
	return d.str(v), true
}

// unescape decodes a validated JSON string body.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '"', '\\', '/':
			b.WriteByte(s[i+1])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, _ := hex4(s, i+2)
			if r >= 0xD800 && r <= 0xDBFF {
				lo, _ := hex4(s, i+8)
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			b.WriteRune(r)
			i += 6
			continue
		}
		i += 2
	}
	return b.String()
}

// writeRaw appends node i as compact JSON. Strings and numbers are copied from the source as
// written (escapes included), so values round-trip exactly; only insignificant whitespace goes.
func (d *doc) writeRaw(buf []byte, i int32) []byte {
	n := d.nodes[i]
	switch n.kind {
	case kNull:
		return append(buf, "null"...)
	case kTrue:
		return append(buf, "true"...)
	case kFalse:
		return append(buf, "false"...)
	case kNumber:
		return append(buf, d.src[n.a:n.b]...)
	case kString:
		buf = append(buf, '"')
		buf = append(buf, d.src[n.a:n.b]...)
		return append(buf, '"')
	case kArray:
		buf = append(buf, '[')
		for j, m := range d.elems(i) {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = d.writeRaw(buf, m.val)
		}
		return append(buf, ']')
	default:
		buf = append(buf, '{')
		for j, m := range d.elems(i) {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = d.writeKey(buf, m)
			buf = d.writeRaw(buf, m.val)
		}
		return append(buf, '}')
	}
}

func (d *doc) writeKey(buf []byte, m member) []byte {
	buf = append(buf, '"')
	buf = append(buf, d.src[m.ka:m.kb]...)
	return append(buf, '"', ':')
}

// --- JSON pointers ---------------------------------------------------------------------------

// pointer renders the RFC 6901 pointer of node n, extended by key when key is not empty (a
// member that may be absent, such as the "path" a step lacks). A walk records nodes, never
// rendered pointers, and the api renders only what it answers: a document with many findings
// deep under long keys would otherwise cost findings x depth x key length bytes.
//
// A pointer longer than max bytes is cut back to the deepest ancestor that fits: it still
// resolves, to a value containing the offender, and the answer stays bounded.
func (d *doc) pointer(n int32, key string, max int) string {
	// Two passes and one buffer: measure every segment from n up to the root, drop the deepest
	// ones until the rest fits, then fill the buffer from the end. No per-level allocation.
	total := 0
	if key != "" {
		total = 1 + tokenLen(key)
	}
	for i := n; i > root; i = d.nodes[i].up {
		total += 1 + d.segLen(i)
	}
	start := n
	if total > max && key != "" {
		total -= 1 + tokenLen(key)
		key = ""
	}
	if total > max {
		for ; start > root && total > max; start = d.nodes[start].up {
			total -= 1 + d.segLen(start)
		}
	}
	b := make([]byte, total)
	end := total
	if key != "" {
		k := escapePointerToken(key)
		end -= len(k)
		copy(b[end:], k)
		end--
		b[end] = '/'
	}
	for i := start; i > root; i = d.nodes[i].up {
		nd := d.nodes[i]
		if d.nodes[nd.up].kind == kArray {
			var num [12]byte
			t := strconv.AppendInt(num[:0], int64(nd.at), 10)
			end -= len(t)
			copy(b[end:], t)
		} else {
			m := d.members[d.nodes[nd.up].a+nd.at]
			raw := d.src[m.ka:m.kb]
			if m.kesc || needsEscape(raw) {
				raw = escapePointerToken(d.key(m))
			}
			end -= len(raw)
			copy(b[end:], raw)
		}
		end--
		b[end] = '/'
	}
	// b is complete and never written again, so it can back the string without a second copy.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// segLen is the rendered length of node i's own pointer token (without the slash).
func (d *doc) segLen(i int32) int {
	nd := d.nodes[i]
	if d.nodes[nd.up].kind == kArray {
		n, l := nd.at, 1
		for n >= 10 {
			n /= 10
			l++
		}
		return l
	}
	m := d.members[d.nodes[nd.up].a+nd.at]
	raw := d.src[m.ka:m.kb]
	if !m.kesc && !needsEscape(raw) {
		return len(raw)
	}
	return tokenLen(d.key(m))
}

// needsEscape reports whether a raw key holds '~' or '/' (a byte loop: keys are short, and
// strings.ContainsAny's setup dominated rendering deep pointers).
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '~' || c == '/' {
			return true
		}
	}
	return false
}

func tokenLen(s string) int {
	return len(s) + strings.Count(s, "~") + strings.Count(s, "/")
}

// escapePointerToken applies RFC 6901: "~" becomes "~0" and "/" becomes "~1", in that order so
// a literal "~1" in a key is not mistaken for an escaped slash.
func escapePointerToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	s = strings.ReplaceAll(s, "~", "~0")
	return strings.ReplaceAll(s, "/", "~1")
}
