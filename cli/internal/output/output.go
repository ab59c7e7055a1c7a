package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Printer writes a command's answer: for people, or as JSON lines when JSON is set.
type Printer struct {
	Out  io.Writer
	JSON bool
}

// jsonOptions are the gateway's field names (REST clients and scripts see one spelling),
// with unset fields printed, so a script reads `"allowed": false` rather than nothing.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// JSONLine writes m as one line of protojson, compacted: protojson varies its spacing on
// purpose from build to build, and a script or a golden file wants the same bytes each time.
func JSONLine(w io.Writer, m proto.Message) error {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// Message prints m: as JSON, or for people as its fields, one "name: value" line each
// (Fields), then each non-empty list of messages as a table under "name:", one column per
// field of the element (a flow check's runnables, an explanation's trace).
func (p *Printer) Message(m proto.Message) error {
	if p.JSON {
		return JSONLine(p.Out, m)
	}
	w := tabwriter.NewWriter(p.Out, 0, 4, 1, ' ', 0)
	for _, f := range Fields(m) {
		fmt.Fprintf(w, "%s:\t%s\n", f[0], orDash(f[1]))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	rm := m.ProtoReflect()
	fds := rm.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if !isMessageList(fd) || rm.Get(fd).List().Len() == 0 {
			continue
		}
		fmt.Fprintf(p.Out, "%s:\n", fd.Name())
		if err := Rows(p.Out, indent(elementColumns(fd.Message(), nil)), listOf(rm.Get(fd).List()), true); err != nil {
			return err
		}
	}
	return nil
}

func isMessageList(fd protoreflect.FieldDescriptor) bool {
	return fd.IsList() && fd.Message() != nil && !isTimestamp(fd.Message())
}

func listOf(l protoreflect.List) []protoreflect.Message {
	out := make([]protoreflect.Message, l.Len())
	for i := range out {
		out[i] = l.Get(i).Message()
	}
	return out
}

// elementColumns are the columns of a table of md: its fields, a nested message's flattened
// as "OUTER.INNER" (a run's job id in a list of runs), each headed by its path in capitals;
// or only the paths named in only, in that order.
func elementColumns(md protoreflect.MessageDescriptor, only []string) []Column[protoreflect.Message] {
	all := leaves(md, nil)
	if len(only) > 0 {
		byPath := map[string][]protoreflect.FieldDescriptor{}
		for _, path := range all {
			byPath[pathName(path)] = path
		}
		all = all[:0]
		for _, name := range only {
			if path, ok := byPath[name]; ok {
				all = append(all, path)
			}
		}
	}
	cols := make([]Column[protoreflect.Message], len(all))
	for i, path := range all {
		cols[i] = Column[protoreflect.Message]{Head: strings.ToUpper(pathName(path)), Value: func(m protoreflect.Message) string {
			for _, fd := range path[:len(path)-1] {
				m = m.Get(fd).Message()
			}
			last := path[len(path)-1]
			return cell(last, m.Get(last))
		}}
	}
	return cols
}

// leaves are the paths to md's fields, through nested messages (not lists, maps or
// timestamps, which print in one cell).
func leaves(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		path := append(slices.Clip(prefix), fd)
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() && !isTimestamp(fd.Message()) && len(path) < 4 {
			out = append(out, leaves(fd.Message(), path)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

func pathName(path []protoreflect.FieldDescriptor) string {
	names := make([]string, len(path))
	for i, fd := range path {
		names[i] = string(fd.Name())
	}
	return strings.Join(names, ".")
}

// cell prints one field of a table row: a list or map joined, a scalar as scalar does.
func cell(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsMap():
		var kv []string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			kv = append(kv, k.String()+"="+scalar(fd.MapValue(), mv))
			return true
		})
		sort.Strings(kv)
		return strings.Join(kv, " ")
	case fd.IsList():
		l := v.List()
		vals := make([]string, l.Len())
		for j := range l.Len() {
			vals[j] = scalar(fd, l.Get(j))
		}
		return strings.Join(vals, ", ")
	}
	return scalar(fd, v)
}

// indent shifts a table right by two spaces, so that it reads as part of the message above.
func indent[T any](cols []Column[T]) []Column[T] {
	if len(cols) == 0 {
		return cols
	}
	first := cols[0]
	cols[0] = Column[T]{Head: "  " + first.Head, Value: func(r T) string { return "  " + orDash(first.Value(r)) }}
	return cols
}

// Column is one column of a table of T: its heading and how to read it from a row.
type Column[T any] struct {
	Head  string
	Value func(T) string
}

// Page prints one page of a list of md (rows of its type): as JSON lines, or as aligned
// columns, one per field of md (nested fields flattened), under headings when head is set (a
// later page continues the first page's table; an empty first page still names its columns).
// only names the columns to show ("seq", "run.job_id"), in order; none shows every field.
func Page[T proto.Message](p *Printer, md protoreflect.MessageDescriptor, rows []T, head bool, only ...string) error {
	if p.JSON {
		for _, r := range rows {
			if err := JSONLine(p.Out, r); err != nil {
				return err
			}
		}
		return nil
	}
	msgs := make([]protoreflect.Message, len(rows))
	for i, r := range rows {
		msgs[i] = r.ProtoReflect()
	}
	return Rows(p.Out, elementColumns(md, only), msgs, head)
}

// Rows prints rows as aligned columns, with the heading line when head is set; an empty
// value prints as "-" so that every column stays readable.
func Rows[T any](w io.Writer, cols []Column[T], rows []T, head bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if head {
		heads := make([]string, len(cols))
		for i, c := range cols {
			heads[i] = c.Head
		}
		fmt.Fprintln(tw, strings.Join(heads, "\t"))
	}
	for _, r := range rows {
		vals := make([]string, len(cols))
		for i, c := range cols {
			vals[i] = orDash(c.Value(r))
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Fields flattens m into ("name", "value") pairs in field order: nested messages as
// "outer.inner", repeated scalars joined by ", ", maps as sorted "k=v", enums by name,
// timestamps in RFC 3339 (UTC); lists of messages are left to Message's tables. An optional field that is not set is left out; every other
// field is shown, zero or not, since "builder: false" is an answer.
func Fields(m proto.Message) [][2]string {
	var out [][2]string
	fields(m.ProtoReflect(), "", &out)
	return out
}

func fields(m protoreflect.Message, prefix string, out *[][2]string) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		name := prefix + string(fd.Name())
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case isMessageList(fd):
			continue // a table of its own (Message)
		case !fd.IsMap() && !fd.IsList() && fd.Message() != nil && !isTimestamp(fd.Message()):
			fields(v.Message(), name+".", out)
		default:
			*out = append(*out, [2]string{name, cell(fd, v)})
		}
	}
}

func isTimestamp(md protoreflect.MessageDescriptor) bool {
	return md.FullName() == (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()
}

// scalar prints one value of fd's kind; a message (in a list or map) as compact JSON.
func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	if ed := fd.Enum(); ed != nil {
		return enumName(ed, v.Enum())
	}
	md := fd.Message()
	if md == nil {
		return v.String()
	}
	if isTimestamp(md) {
		return Time(v.Message().Interface().(*timestamppb.Timestamp)) //nolint:forcetypeassert // the descriptor says so
	}
	// A wrapper of one field (a data table's Tenants) reads as that field.
	if only := md.Fields(); only.Len() == 1 {
		return cell(only.Get(0), v.Message().Get(only.Get(0)))
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(v.Message().Interface())
	if err != nil {
		return err.Error()
	}
	var c bytes.Buffer
	if json.Compact(&c, b) != nil {
		return string(b)
	}
	return c.String()
}

// enumName is a value's name, or its number when this build does not know it (a newer server).
func enumName(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	if ev := ed.Values().ByNumber(n); ev != nil {
		return string(ev.Name())
	}
	return strconv.Itoa(int(n))
}

// Time prints a timestamp in RFC 3339, UTC, to the second; "" when unset.
func Time(ts *timestamppb.Timestamp) string {
	if ts == nil || (ts.GetSeconds() == 0 && ts.GetNanos() == 0) {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}
