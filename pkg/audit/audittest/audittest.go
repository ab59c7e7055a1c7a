package audittest

import (
	"regexp"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/millwright/millwright/pkg/audit"
)

// Services returns the full names of the services register registers: a service's own
// registration function, so a new service is covered without being listed anywhere.
func Services(register func(*grpc.Server)) []string {
	gs := grpc.NewServer()
	register(gs)
	var names []string
	for n := range gs.GetServiceInfo() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Complete fails t for every RPC of services that rules neither records nor leaves out with a
// reason, for every streaming RPC that is recorded (the interceptor records unary calls only),
// and for every rule that names no RPC of services (a renamed RPC must not leave its rule
// behind while the new name goes unlisted).
func Complete(t testing.TB, rules audit.Rules, services ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Errorf("service %s: %v", name, err)
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			t.Errorf("%s is not a service", name)
			continue
		}
		for i := range sd.Methods().Len() {
			m := sd.Methods().Get(i)
			full := "/" + name + "/" + string(m.Name())
			seen[full] = true
			r, ok := rules[full]
			switch {
			case !ok:
				t.Errorf("%s is neither audited nor listed as not audited with a reason: add it to the service's audit rules", full)
			case r.Skip == "" && r.Class == "":
				t.Errorf("%s: a rule needs a class, or a reason not to audit", full)
			case r.Skip == "" && (m.IsStreamingClient() || m.IsStreamingServer()):
				t.Errorf("%s streams: the trail records unary calls only; list it as not audited with a reason", full)
			}
		}
	}
	for full := range rules {
		if !seen[full] {
			t.Errorf("the audit rules name %s, which the service does not serve", full)
		}
	}
}

// secretName is a field name that suggests a secret.
var secretName = regexp.MustCompile(`(^|_)(token|password|secret|credential|ticket)$`)

// notSecret are fields whose names look secret but hold none: paging cursors, and ids.
var notSecret = map[string]bool{"page_token": true, "next_page_token": true}

// Redacted fails t for every field of the files of services whose name looks like a secret
// (token, password, secret, credential, ticket) but that is not marked debug_redact.
func Redacted(t testing.TB, services ...string) {
	t.Helper()
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Errorf("service %s: %v", name, err)
			continue
		}
		msgs := d.ParentFile().Messages()
		for i := range msgs.Len() {
			checkMessage(t, msgs.Get(i))
		}
	}
}

func checkMessage(t testing.TB, md protoreflect.MessageDescriptor) {
	t.Helper()
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		n := string(fd.Name())
		if !secretName.MatchString(n) || notSecret[n] {
			continue
		}
		opts, _ := fd.Options().(*descriptorpb.FieldOptions)
		if !opts.GetDebugRedact() {
			t.Errorf("%s looks like a secret: mark it [debug_redact = true] so the audit trail records only its keyed hash", fd.FullName())
		}
	}
	nested := md.Messages()
	for i := range nested.Len() {
		checkMessage(t, nested.Get(i))
	}
}
