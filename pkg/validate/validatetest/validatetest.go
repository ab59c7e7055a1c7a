package validatetest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/millwright/millwright/pkg/errs"
	"github.com/millwright/millwright/pkg/validate"
)

// Fields maps a request field name to the rule it obeys in every service that takes it.
var Fields = map[string]string{
	"workspace":            validate.RuleWorkspace,
	"username":             validate.RuleUsername,
	"admin_username":       validate.RuleUsername,
	"email":                validate.RuleEmail,
	"admin_email":          validate.RuleEmail,
	"cluster_id":           validate.RuleClusterID,
	"host":                 validate.RuleHost,
	"maintenance_database": validate.RuleIdentifier,
	"database":             validate.RuleIdentifier,
	"admin_user":           validate.RuleIdentifier,
	"path":                 validate.RulePath,
}

// Bad lists, per rule, values every service must refuse with that rule.
var Bad = map[string][]string{
	validate.RuleWorkspace: {"Demo", "a b!", "-w", "w.x", "w\u00a0", "\u212a", strings.Repeat("w", 51)},
	validate.RuleUsername:  {"Alice", "a b!", ".a", "a/b", "a,b", "\u212aelvin", strings.Repeat("u", 51)},
	validate.RuleEmail: {"Alice@x", "a b!", " a@x", "a@x ", "a\u00a0@x", "\u212aelvin@x", "a@\u212a.com",
		"\uff41@x", "a@b@c", "no-at", "a,b@x", strings.Repeat("a", 250) + "@x.com"},
	validate.RuleClusterID:  {"Main", "a b!", "a/b", strings.Repeat("c", 64)},
	validate.RuleHost:       {"a b!", "a/b", "h\u00e9", strings.Repeat("h", 254)},
	validate.RuleIdentifier: {"a b!", "a;b", "a\"b", strings.Repeat("i", 64)},
	validate.RulePath:       {"a b!", "u/Alice/x", "h/x/y", "u/alice", "f/a.b/x", "u/alice/.x"},
}

// Options are a service's exceptions, each with its reason, by full field name
// ("millwright.policy.v1.CheckPreviewRequest.path").
type Options struct {
	// Other: fields of a mapped name that mean something else here (not checked).
	Other map[string]string
	// Optional: fields where "" is allowed (it means the caller, or "any").
	Optional map[string]string
}

// Run checks the services' registry: every request type that has a mapped field needs a base
// (a valid request) setting it, and every bad value in every set field is refused with the
// field's rule, naming the field; "" is refused as required unless the field is optional.
func Run(t *testing.T, reg *validate.Registry, sds []grpc.ServiceDesc, bases []proto.Message, opts Options) {
	t.Helper()
	covered := map[string]bool{}
	for _, base := range bases {
		name := string(base.ProtoReflect().Descriptor().FullName())
		require.NoError(t, reg.Validate(base), "base %s must be valid", name)
		for _, f := range setFields(base.ProtoReflect(), "") {
			full := string(f.fd.FullName())
			if _, other := opts.Other[full]; other {
				continue
			}
			covered[full] = true
			rule := Fields[string(f.fd.Name())]
			cases := append([]string{""}, Bad[rule]...)
			for _, bad := range cases {
				t.Run(fmt.Sprintf("%s.%s=%q", base.ProtoReflect().Descriptor().Name(), f.path, bad), func(t *testing.T) {
					m := proto.Clone(base)
					f.set(m.ProtoReflect(), bad)
					err := reg.Validate(m)
					if _, opt := opts.Optional[full]; bad == "" && opt {
						return // "" has a meaning here; checked by the service's own tests
					}
					require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
					md := errs.Infos(err)[0].GetMetadata()
					want := rule
					if bad == "" {
						want = validate.RuleRequired
					}
					require.Equal(t, want, md["rule"], "%v", err)
					require.Equal(t, f.path, md["field"], "%v", err)
				})
			}
		}
	}
	var missing []string
	for _, sd := range sds {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		require.NoError(t, err)
		svc, ok := d.(protoreflect.ServiceDescriptor)
		require.True(t, ok, "%s is not a service", sd.ServiceName)
		methods := svc.Methods()
		for i := range methods.Len() {
			for _, fd := range mappedFields(methods.Get(i).Input(), map[protoreflect.FullName]bool{}) {
				full := string(fd.FullName())
				if _, other := opts.Other[full]; !other && !covered[full] {
					missing = append(missing, full)
				}
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "fields with a shared rule that no base sets: add a base request setting them")
}

type setField struct {
	fd   protoreflect.FieldDescriptor
	path string
	set  func(root protoreflect.Message, v string)
}

// setFields returns the mapped string fields that m sets, through set message fields and the
// first element of lists of messages, with the field path validators name.
func setFields(m protoreflect.Message, prefix string) []setField {
	var out []setField
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		at := func(root protoreflect.Message) protoreflect.Message { return follow(root, prefix) }
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			if _, ok := Fields[string(fd.Name())]; ok {
				out = append(out, setField{fd: fd, path: path, set: func(root protoreflect.Message, s string) {
					at(root).Set(fd, protoreflect.ValueOfString(s))
				}})
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList() && v.List().Len() > 0:
			out = append(out, setFields(v.List().Get(0).Message(), path+"[0].")...)
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			out = append(out, setFields(v.Message(), path+".")...)
		}
		return true
	})
	return out
}

// follow walks a "a.b[0].c." prefix from root to the message it names.
func follow(root protoreflect.Message, prefix string) protoreflect.Message {
	m := root
	for _, part := range strings.Split(strings.TrimSuffix(prefix, "."), ".") {
		if part == "" {
			continue
		}
		name, list := strings.CutSuffix(part, "[0]")
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if list {
			m = m.Mutable(fd).List().Get(0).Message()
		} else {
			m = m.Mutable(fd).Message()
		}
	}
	return m
}

// mappedFields lists the mapped string fields a message type can carry, nested ones included.
func mappedFields(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) []protoreflect.FieldDescriptor {
	if seen[md.FullName()] {
		return nil
	}
	seen[md.FullName()] = true
	var out []protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind && !fd.IsList():
			if _, ok := Fields[string(fd.Name())]; ok {
				out = append(out, fd)
			}
		case fd.Kind() == protoreflect.MessageKind:
			out = append(out, mappedFields(fd.Message(), seen)...)
		}
	}
	return out
}
