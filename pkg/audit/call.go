package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/server/reqctx"
)

// Rule says what the trail does with one RPC: record it as a decision of Class, or not, for
// the reason in Skip. Mutates: the RPC changes state, so when its class fails closed a
// "requested" event is written before the change is made (a change cannot be taken back once
// committed; a credential can be withheld, so credentials need no such event).
type Rule struct {
	Class   Class
	Mutates bool
	Skip    string
}

// Decision is the rule of an RPC that decides without changing anything.
func Decision(c Class) Rule { return Rule{Class: c} }

// Mutation is the rule of an RPC that changes state.
func Mutation(c Class) Rule { return Rule{Class: c, Mutates: true} }

// NotAudited is the rule of an RPC the trail leaves out, with the reason.
func NotAudited(reason string) Rule { return Rule{Skip: reason} }

// Rules maps full method names (/pkg.Service/Method) to their rule. Every RPC a service serves
// must be listed (audittest.Complete); one that is not is recorded as a change, failing closed.
type Rules map[string]Rule

// With returns rs and more together (more wins on a method in both).
func (rs Rules) With(more Rules) Rules {
	out := maps.Clone(rs)
	maps.Copy(out, more)
	return out
}

func (rs Rules) of(method string) Rule {
	if r, ok := rs[method]; ok {
		return r
	}
	return Mutation(Change)
}

// notes is what a handler adds to its call's event (Note).
type notes struct {
	mu      sync.Mutex
	details map[string]string
}

type notesKey struct{}

// Note adds a detail to the event of the call ctx belongs to: what only the handler knows,
// such as the login and roles of an issued credential. A no-op outside an audited call. Never
// pass a secret: pass Hasher.Hash of it.
func Note(ctx context.Context, key, value string) {
	n, _ := ctx.Value(notesKey{}).(*notes)
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.details == nil {
		n.details = map[string]string{}
	}
	n.details[key] = value
	n.mu.Unlock()
}

// Interceptor is the audit step of the server's interceptor chain: it runs after
// authentication (the actor is known) and around validation and the handler, so bad input is
// a recorded refusal and the status it sees is final.
type Interceptor struct {
	Recorder *Recorder
	Rules    Rules
}

// Unary records the call's decision before its answer goes out. When the write fails and the
// class fails closed, the answer is withheld: the call fails with Unavailable and reason
// AUDIT_UNAVAILABLE. A mutating RPC of a fail-closed class first writes a "requested" event,
// and is refused without being run when that fails.
func (a *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	rule := a.Rules.of(info.FullMethod)
	if rule.Skip != "" {
		return h(ctx, req)
	}
	closed := a.Recorder.FailsClosed(rule.Class)
	if rule.Mutates && closed {
		e := a.event(ctx, info.FullMethod, rule.Class, req, nil)
		e.Outcome, e.Code = Requested, ""
		if err := a.Recorder.Record(ctx, e); err != nil {
			return nil, a.unavailable(ctx, rule.Class, err)
		}
	}
	n := &notes{}
	resp, err := h(context.WithValue(ctx, notesKey{}, n), req)
	e := a.event(ctx, info.FullMethod, rule.Class, req, err)
	n.mu.Lock()
	for k, v := range n.details {
		e.Details[k] = v
	}
	n.mu.Unlock()
	if werr := a.Recorder.Record(ctx, e); werr != nil {
		if closed && err == nil && !rule.Mutates {
			return nil, a.unavailable(ctx, rule.Class, werr)
		}
		reqctx.Logger(ctx).ErrorContext(ctx, "audit: event not recorded; answering anyway (its class fails open, or the change is made)",
			"class", string(rule.Class), "rpc", e.RPC, "outcome", e.Outcome, "rule", e.Rule, "object", e.Object, "err", werr)
	}
	return resp, err
}

func (a *Interceptor) unavailable(ctx context.Context, c Class, err error) error {
	reqctx.Logger(ctx).ErrorContext(ctx, "audit: refusing a call whose decision cannot be recorded", "class", string(c), "err", err)
	return errs.New(codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_AUDIT_UNAVAILABLE,
		"the audit trail cannot be written; "+string(c)+" decisions are not made without it", map[string]string{"class": string(c)})
}

// Stream passes streaming calls through: every streaming RPC is a read (audittest.Complete
// requires them to be NotAudited).
func (a *Interceptor) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, ss)
}

// event builds the event of a call from its identity, request and result.
func (a *Interceptor) event(ctx context.Context, method string, c Class, req any, err error) Event {
	e := Event{RPC: method, Class: c, Outcome: Granted, Code: codes.OK.String(), Details: map[string]string{},
		RequestID: reqctx.RequestID(ctx)}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		e.TraceID = sc.TraceID().String()
	}
	if id, ok := auth.FromContext(ctx); ok {
		e.ActorKind, e.Workspace = id.Kind.String(), id.Workspace
		switch {
		case id.Kind == auth.Job:
			e.Actor = id.JobID
		case id.Username != "":
			e.Actor = id.Username
		default:
			e.Actor = id.TokenID
		}
	} else {
		e.ActorKind = "anonymous"
	}
	if err != nil {
		st := status.Convert(err)
		e.Code = st.Code().String()
		switch st.Code() {
		case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.Canceled, codes.DataLoss, codes.Aborted:
			e.Outcome = Failed
		default:
			e.Outcome = Refused
		}
		if r, ok := errs.Reason(err); ok {
			e.Rule = r.String()
		}
		for _, info := range errs.Infos(err) {
			if p := info.GetMetadata()["pointer"]; p != "" {
				e.Pointer = p
				break
			}
			if f := info.GetMetadata()["field"]; f != "" {
				e.Pointer = f
				break
			}
		}
	}
	if m, ok := req.(proto.Message); ok {
		a.describe(&e, m.ProtoReflect())
	}
	return e
}

// objectFields name what a request is about: they make the event's object.
var objectFields = map[protoreflect.Name]bool{
	"path": true, "datatable": true, "data_table": true, "role": true, "role_id": true, "name": true,
	"username": true, "group": true, "folder": true, "job_id": true, "token_id": true, "cluster": true,
	"cluster_id": true, "reference": true, "login": true, "email": true, "kind": true, "script_hash": true,
}

// maxDetail is the longest value recorded as is; longer ones are recorded as their length and
// SHA-256 (a flow's JSON: the trail says which one, not what it says).
const maxDetail = 200

// describe fills the event's workspace, on_behalf_of, object and details from the request's
// top-level fields. Secrets (fields with debug_redact) become keyed hashes.
func (a *Interceptor) describe(e *Event, m protoreflect.Message) {
	var object []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := fd.Name()
		val := a.value(fd, v)
		switch {
		case name == "workspace" && fd.Kind() == protoreflect.StringKind:
			e.Workspace = v.String()
		case name == "on_behalf_of" && fd.Kind() == protoreflect.StringKind:
			e.OnBehalfOf = v.String()
		case objectFields[name] && !redacted(fd) && !fd.IsList() && !fd.IsMap() && len(val) <= maxDetail:
			object = append(object, string(name)+"="+val)
		default:
			e.Details[string(name)] = val
		}
		return true
	})
	slices.Sort(object)
	e.Object = strings.Join(object, " ")
}

// value is how a field's value is recorded.
func (a *Interceptor) value(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	if redacted(fd) {
		if a.Recorder.Hasher() == nil {
			return "redacted"
		}
		if fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			return a.Recorder.Hasher().Hash(v.String())
		}
		return "redacted"
	}
	var s string
	switch {
	case fd.IsList():
		l := v.List()
		parts := make([]string, 0, l.Len())
		for i := range l.Len() {
			parts = append(parts, scalar(fd, l.Get(i)))
		}
		s = strings.Join(parts, ",")
	case fd.IsMap():
		pairs := []string{}
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			pairs = append(pairs, k.String()+"="+scalar(fd.MapValue(), mv))
			return true
		})
		slices.Sort(pairs)
		s = strings.Join(pairs, ",")
	default:
		s = scalar(fd, v)
	}
	if len(s) > maxDetail {
		return digest([]byte(s))
	}
	return s
}

func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return fmt.Sprint(v.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		// A small message without secrets (a settings patch) is recorded as its JSON, so
		// the trail says what changed; one that may hold a secret only as its digest.
		if !holdsSecret(fd.Message(), 0) {
			// Compacted: protojson's spacing varies from run to run on purpose.
			var c bytes.Buffer
			if b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(v.Message().Interface()); err == nil &&
				json.Compact(&c, b) == nil && c.Len() <= maxDetail {
				return c.String()
			}
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(v.Message().Interface())
		return digest(b)
	case protoreflect.BytesKind:
		return digest(v.Bytes())
	default:
		return v.String()
	}
}

// digest records a large value: its length and SHA-256.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("sha256:%s len=%d", hex.EncodeToString(sum[:]), len(b))
}

// holdsSecret reports whether md or a message inside it has a debug_redact field (or nests
// deeper than anything millwright sends, which is treated as holding one).
func holdsSecret(md protoreflect.MessageDescriptor, depth int) bool {
	if depth > 8 {
		return true
	}
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		if redacted(fd) {
			return true
		}
		if m := fd.Message(); m != nil && m.FullName() != md.FullName() && holdsSecret(m, depth+1) {
			return true
		}
	}
	return false
}

// redacted reports whether a field holds a secret: it carries debug_redact in the proto.
func redacted(fd protoreflect.FieldDescriptor) bool {
	opts, ok := fd.Options().(*descriptorpb.FieldOptions)
	return ok && opts.GetDebugRedact()
}
