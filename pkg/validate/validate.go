package validate

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Registry maps request message types to their validator. Fill it at start-up with Add; it
// is read-only afterwards, so Validate needs no lock.
type Registry struct {
	fns map[protoreflect.FullName]func(proto.Message) error
}

// NewRegistry returns an empty registry (the zero Registry works too).
func NewRegistry() *Registry { return &Registry{} }

// Add registers fn as the validator of messages of type T. fn returns nil, a
// *FieldError, or a status error (e.g. from errs.InvalidField or a helper here). Adding a
// second validator for the same type panics: two places per message is what this package
// exists to prevent.
func Add[T proto.Message](r *Registry, fn func(T) error) {
	var zero T
	name := zero.ProtoReflect().Descriptor().FullName()
	if r.fns == nil {
		r.fns = map[protoreflect.FullName]func(proto.Message) error{}
	}
	if _, dup := r.fns[name]; dup {
		panic(fmt.Sprintf("validate: second validator for %s", name))
	}
	r.fns[name] = func(m proto.Message) error {
		t, ok := m.(T)
		if !ok { // the registry is keyed by T's own name: only a T reaches here
			return fmt.Errorf("validate: %s validator given a %T", name, m)
		}
		return fn(t)
	}
}

// Validate runs the validator of msg's type and returns a gRPC status error (nil if valid).
func (r *Registry) Validate(msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "no validator for %T: not a protobuf message", msg)
	}
	name := m.ProtoReflect().Descriptor().FullName()
	fn := r.fns[name]
	if fn == nil {
		return status.Errorf(codes.Internal, "no validator for %s", name)
	}
	return normalize(fn(m))
}

// normalize makes every validator result a status: a validator that returns a plain error
// still means "this input is bad", never a server failure.
func normalize(err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.status()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return errs.New(codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD, err.Error(), nil)
}

// Missing returns, sorted, the request types of the given services that have no validator.
// A service's test asserts it is empty. Services must have their descriptors registered
// (importing the generated package does that).
func (r *Registry) Missing(sds ...grpc.ServiceDesc) []string {
	var descs []protoreflect.ServiceDescriptor
	var out []string
	for _, sd := range sds {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		sdesc, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			out = append(out, sd.ServiceName+": descriptor not registered")
			continue
		}
		descs = append(descs, sdesc)
	}
	out = append(out, r.MissingDescriptors(descs...)...)
	sort.Strings(out)
	return out
}

// MissingDescriptors is Missing for service descriptors.
func (r *Registry) MissingDescriptors(sds ...protoreflect.ServiceDescriptor) []string {
	seen := map[protoreflect.FullName]bool{}
	var out []string
	for _, sd := range sds {
		methods := sd.Methods()
		for i := range methods.Len() {
			in := methods.Get(i).Input().FullName()
			if seen[in] {
				continue
			}
			seen[in] = true
			if r.fns[in] == nil {
				out = append(out, string(in))
			}
		}
	}
	sort.Strings(out)
	return out
}
