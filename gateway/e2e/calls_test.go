package e2e

// Generic calls: any millwright RPC, named by its full method name, with a protojson request,
// over gRPC (straight to the owning service) or over REST (through the gateway, on the route
// of the method's google.api.http annotation). The isolation matrix and the attack corpus are
// data files; this is how they reach the stack without a hand-written client per method.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/millwright/millwright/pkg/apidesc"
	"github.com/millwright/millwright/pkg/errs"
)

// rpcMethods returns every method of every millwright service in the embedded descriptors
// (pkg/apidesc), by full name "millwright.<svc>.v1.<Service>/<Method>". Nothing is listed by
// hand: a new RPC appears here as soon as its proto is generated.
func rpcMethods(t *testing.T) map[string]protoreflect.MethodDescriptor {
	t.Helper()
	files, err := apidesc.Files()
	require.NoError(t, err)
	out := map[string]protoreflect.MethodDescriptor{}
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "millwright.") {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				out[string(sd.FullName())+"/"+string(md.Name())] = md
			}
		}
		return true
	})
	require.NotEmpty(t, out)
	return out
}

// callResult is one call's outcome as both transports report it.
type callResult struct {
	Code   codes.Code
	Reason string            // the millwright ErrorInfo reason, if any
	MD     map[string]string // its metadata
	HTTP   int               // REST only
	Text   string            // everything sent back (message, details, response), for leak checks
}

// caller reaches the stack's services and gateway.
type caller struct {
	conns map[string]*grpc.ClientConn // by service package segment: policy, roleset, billing
	http  string
}

func newCaller(t *testing.T, st *Stack) *caller {
	return &caller{http: st.HTTP, conns: map[string]*grpc.ClientConn{
		"policy": dialT(t, st.Policy), "roleset": dialT(t, st.Roleset), "billing": dialT(t, st.Billing)}}
}

// request parses a protojson request for md: unknown fields are an error in the data file.
func request(t *testing.T, md protoreflect.MethodDescriptor, js string) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(md.Input())
	require.NoError(t, protojson.Unmarshal([]byte(js), m), "request of %s: %s", md.FullName(), js)
	return m
}

func (c *caller) call(t *testing.T, transport string, md protoreflect.MethodDescriptor, req *dynamicpb.Message, token string) callResult {
	t.Helper()
	switch transport {
	case "grpc":
		return c.grpc(t, md, req, token)
	case "rest":
		return c.rest(t, md, req, token)
	}
	t.Fatalf("unknown transport %q", transport)
	return callResult{}
}

func (c *caller) grpc(t *testing.T, md protoreflect.MethodDescriptor, req *dynamicpb.Message, token string) callResult {
	t.Helper()
	svc := md.Parent().(protoreflect.ServiceDescriptor)
	name := strings.Split(string(svc.FullName()), ".")[1]
	if name == "audit" { // every service serves AuditService: the request's service names which
		name = req.Get(req.Descriptor().Fields().ByName("service")).String()
	}
	conn := c.conns[name]
	require.NotNil(t, conn, "no connection for %s", svc.FullName())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	path := "/" + string(svc.FullName()) + "/" + string(md.Name())
	resp := dynamicpb.NewMessage(md.Output())
	var err error
	if md.IsStreamingServer() {
		// A refused stream fails its first receive; an accepted one sends a first message
		// (an event, or the heartbeat Watch sends once the backlog is drained).
		var s grpc.ClientStream
		s, err = conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, path)
		if err == nil {
			if err = s.SendMsg(req); err == nil {
				if err = s.CloseSend(); err == nil {
					err = s.RecvMsg(resp)
				}
			}
		}
	} else {
		err = conn.Invoke(ctx, path, req, resp)
	}
	if err == nil {
		b, _ := protojson.Marshal(resp)
		return callResult{Code: codes.OK, Text: string(b)}
	}
	st := status.Convert(err)
	return resultOf(st.Proto(), 0)
}

func resultOf(p *spb.Status, httpCode int) callResult {
	r := callResult{Code: codes.Code(p.GetCode()), HTTP: httpCode}
	b, _ := protojson.Marshal(p)
	r.Text = p.GetMessage() + " " + string(b)
	for _, a := range p.GetDetails() {
		var info errdetails.ErrorInfo
		if a.MessageIs(&info) && a.UnmarshalTo(&info) == nil && info.GetDomain() == errs.Domain {
			r.Reason, r.MD = info.GetReason(), info.GetMetadata()
		}
	}
	return r
}

var pathParam = regexp.MustCompile(`\{([a-z_.]+)(=[^}]*)?\}`)

// rest sends the request on the method's annotated route: path parameters filled from the
// request, the body as annotated ("*": the whole request), other fields of a body-less route
// as query parameters, the way grpc-gateway maps them back.
func (c *caller) rest(t *testing.T, md protoreflect.MethodDescriptor, req *dynamicpb.Message, token string) callResult {
	t.Helper()
	rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	require.True(t, ok && rule != nil, "%s has no google.api.http annotation", md.FullName())
	var verb, tmpl string
	switch p := rule.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		verb, tmpl = http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		verb, tmpl = http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		verb, tmpl = http.MethodPut, p.Put
	case *annotations.HttpRule_Delete:
		verb, tmpl = http.MethodDelete, p.Delete
	case *annotations.HttpRule_Patch:
		verb, tmpl = http.MethodPatch, p.Patch
	default:
		t.Fatalf("%s: unsupported http pattern %T", md.FullName(), p)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(js, &fields))
	used := map[string]bool{}
	p := pathParam.ReplaceAllStringFunc(tmpl, func(m string) string {
		name := pathParam.FindStringSubmatch(m)[1]
		used[name] = true
		return url.PathEscape(fmt.Sprint(fields[name]))
	})
	var body io.Reader
	switch rule.GetBody() {
	case "*":
		body = bytes.NewReader(js)
	case "":
		q := url.Values{}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if used[k] {
				continue
			}
			switch v := fields[k].(type) {
			case []any:
				for _, e := range v {
					q.Add(k, fmt.Sprint(e))
				}
			case map[string]any:
				t.Fatalf("%s: a message field (%s) cannot go in a query", md.FullName(), k)
			default:
				q.Add(k, fmt.Sprint(v))
			}
		}
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
	default:
		b, err := json.Marshal(fields[rule.GetBody()])
		require.NoError(t, err)
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, verb, c.http+p, body)
	require.NoError(t, err)
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(hr)
	require.NoError(t, err, "%s %s", verb, p)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		// Accepted; a stream (Watch) would not end, so read only what has come by now.
		b := make([]byte, 64<<10)
		n, _ := io.ReadAtLeast(resp.Body, b, 1)
		return callResult{Code: codes.OK, HTTP: 200, Text: string(b[:n])}
	}
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	// A unary refusal is a google.rpc.Status; a stream's is {"error": Status}.
	var wrapped struct {
		Error json.RawMessage `json:"error"`
	}
	sb := raw
	if json.Unmarshal(raw, &wrapped) == nil && len(wrapped.Error) > 0 {
		sb = wrapped.Error
	}
	var st spb.Status
	require.NoError(t, protojson.Unmarshal(sb, &st), "%s %s: HTTP %d: %s", verb, p, resp.StatusCode, raw)
	r := resultOf(&st, resp.StatusCode)
	r.Text += " " + string(raw)
	return r
}
