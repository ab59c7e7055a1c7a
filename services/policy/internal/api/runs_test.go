package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/api"
)

var jobSeq int

func nextJob() string {
	jobSeq++
	return fmt.Sprintf("00000000-0000-0000-0000-%012x", jobSeq)
}

// TestNoRequestFieldNamesAViewer walks every request message of every policy RPC: no field
// (at any depth) may be named like a viewer or end-user email, so none can reach a run's viewer.
func TestNoRequestFieldNamesAViewer(t *testing.T) {
	var walk func(md protoreflect.MessageDescriptor, prefix string, seen map[protoreflect.FullName]bool)
	walk = func(md protoreflect.MessageDescriptor, prefix string, seen map[protoreflect.FullName]bool) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			name := strings.ToLower(string(f.Name()))
			require.False(t, strings.Contains(name, "viewer") || strings.Contains(name, "end_user"),
				"request field %s%s could name a viewer", prefix, f.Name())
			if f.Message() != nil {
				walk(f.Message(), prefix+string(f.Name())+".", seen)
			}
		}
	}
	for _, sd := range api.ServiceDescs {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		require.NoError(t, err)
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			walk(methods.Get(i).Input(), string(methods.Get(i).Name())+": ", map[protoreflect.FullName]bool{})
		}
	}
}

func TestRunViewer(t *testing.T) {
	r := replicaWith(t, "a", "b")
	member(t, r, "a", "alice", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "a", "bob", policyv1.Role_ROLE_DEVELOPER)
	member(t, r, "b", "mallory", policyv1.Role_ROLE_ADMIN)
	alice := userToken(t, r, "a", "alice")
	bob := userToken(t, r, "a", "bob")
	mallory := userToken(t, r, "b", "mallory")

	record := func(origin policyv1.RunOrigin, cred, permAs string) (*policyv1.RecordRunResponse, error) {
		return r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: nextJob(),
			PermissionedAs: permAs, Origin: origin, Credential: cred})
	}
	mustRecord := func(origin policyv1.RunOrigin, cred, permAs string) *policyv1.RecordRunResponse {
		t.Helper()
		resp, err := record(origin, cred, permAs)
		require.NoError(t, err)
		return resp
	}
	viewerOf := func(jobToken string) (bool, string) {
		t.Helper()
		id, err := r.run.GetRunIdentity(service, &policyv1.GetRunIdentityRequest{JobToken: jobToken})
		require.NoError(t, err)
		return id.GetRun().GetHasViewer(), id.GetRun().GetViewerEmail()
	}

	direct := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_DIRECT, alice, "u/alice")
	session := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION, bob, "u/publisher")
	preview := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_PREVIEW, bob, "u/bob")
	anon := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_APP_ANONYMOUS, "", "u/publisher")
	child := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, direct.GetJobToken(), "")
	grandchild := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, child.GetJobToken(), "u/alice")
	anonChild := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, anon.GetJobToken(), "")

	t.Run("viewer per origin", func(t *testing.T) {
		cases := []struct {
			name   string
			token  string
			has    bool
			viewer string
		}{
			{"direct run: the caller", direct.GetJobToken(), true, "alice@x"},
			{"app with session: the session user", session.GetJobToken(), true, "bob@x"},
			{"preview: the caller", preview.GetJobToken(), true, "bob@x"},
			{"anonymous app: none", anon.GetJobToken(), false, ""},
			{"child of a job token: the parent's viewer", child.GetJobToken(), true, "alice@x"},
			{"grandchild: still the root's viewer", grandchild.GetJobToken(), true, "alice@x"},
			{"child of an anonymous run: none", anonChild.GetJobToken(), false, ""},
		}
		for _, o := range []policyv1.RunOrigin{policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE, policyv1.RunOrigin_RUN_ORIGIN_TRIGGER,
			policyv1.RunOrigin_RUN_ORIGIN_AI_TOOL} {
			cases = append(cases, struct {
				name   string
				token  string
				has    bool
				viewer string
			}{o.String() + ": none", mustRecord(o, "", "u/alice").GetJobToken(), false, ""})
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				has, v := viewerOf(tc.token)
				require.Equal(t, tc.has, has)
				require.Equal(t, tc.viewer, v)
			})
		}
		id, err := r.run.GetRunIdentity(service, &policyv1.GetRunIdentityRequest{JobToken: child.GetJobToken()})
		require.NoError(t, err)
		require.Equal(t, direct.GetRun().GetJobId(), id.GetRun().GetParentJobId())
		require.Equal(t, "u/alice", id.GetRun().GetPermissionedAs(), "permissioned_as defaults to the parent's")
	})

	t.Run("refusals", func(t *testing.T) {
		cases := []struct {
			name   string
			origin policyv1.RunOrigin
			cred   string
			permAs string
			check  func(t *testing.T, err error)
		}{
			{"schedule with a credential", policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE, alice, "u/alice",
				func(t *testing.T, err error) { requireField(t, err, "credential") }},
			{"anonymous app with a credential", policyv1.RunOrigin_RUN_ORIGIN_APP_ANONYMOUS, alice, "u/p",
				func(t *testing.T, err error) { requireField(t, err, "credential") }},
			{"direct without a credential", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, "", "u/alice",
				func(t *testing.T, err error) { requireField(t, err, "credential") }},
			{"direct with an email as credential", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, "admin@x", "u/alice",
				func(t *testing.T, err error) {
					requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
				}},
			{"direct with a job token as credential", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, direct.GetJobToken(), "u/alice",
				func(t *testing.T, err error) {
					requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
				}},
			{"direct with the service token as credential", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, serviceToken, "u/alice",
				func(t *testing.T, err error) {
					requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
				}},
			{"session of another workspace", policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION, mallory, "u/p",
				func(t *testing.T, err error) {
					requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
				}},
			{"job-token origin with a user token", policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, bob, "",
				func(t *testing.T, err error) {
					requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
				}},
			{"child changing permissioned_as", policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, direct.GetJobToken(), "u/bob",
				func(t *testing.T, err error) { requireField(t, err, "permissioned_as") }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := record(tc.origin, tc.cred, tc.permAs)
				tc.check(t, err)
			})
		}
	})

	t.Run("a recorded run cannot be re-recorded with another viewer", func(t *testing.T) {
		_, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: direct.GetRun().GetJobId(),
			PermissionedAs: "u/bob", Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: bob})
		requireCode(t, err, codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS)
		_, v := viewerOf(direct.GetJobToken())
		require.Equal(t, "alice@x", v)
	})

	t.Run("the database refuses a viewer change too", func(t *testing.T) {
		conn, err := pgx.Connect(context.Background(), r.dsn)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), `UPDATE run SET viewer_email = 'mallory@x' WHERE job_id = $1`, direct.GetRun().GetJobId())
		require.Error(t, err)
		_, err = conn.Exec(context.Background(), `UPDATE run SET viewer_email = 'mallory@x' WHERE job_id = $1`, anon.GetRun().GetJobId())
		require.Error(t, err)
	})

	t.Run("a finished run's token starts nothing", func(t *testing.T) {
		parent := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_DIRECT, alice, "u/alice")
		_, err := r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "a", JobId: parent.GetRun().GetJobId()})
		require.NoError(t, err)
		_, err = r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "a", JobId: parent.GetRun().GetJobId()})
		require.NoError(t, err, "idempotent")
		_, err = record(policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, parent.GetJobToken(), "")
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		_, err = r.run.GetRunIdentity(service, &policyv1.GetRunIdentityRequest{JobToken: parent.GetJobToken()})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		_, err = r.run.GetRunIdentity(as(parent.GetJobToken()), &policyv1.GetRunIdentityRequest{})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
	})

	t.Run("a job token asks only about its own run", func(t *testing.T) {
		_, err := r.run.GetRunIdentity(as(anon.GetJobToken()), &policyv1.GetRunIdentityRequest{JobToken: direct.GetJobToken()})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
		id, err := r.run.GetRunIdentity(as(anon.GetJobToken()), &policyv1.GetRunIdentityRequest{})
		require.NoError(t, err)
		require.False(t, id.GetRun().GetHasViewer())
	})

	t.Run("result cache key", func(t *testing.T) {
		key := func(jobToken string, args string, path string) string {
			t.Helper()
			req := &policyv1.ResultCacheKeyRequest{JobToken: jobToken, Kind: "script", ArgsJson: args}
			if path != "" {
				req.Runnable = &policyv1.ResultCacheKeyRequest_Path{Path: path}
			} else {
				req.Runnable = &policyv1.ResultCacheKeyRequest_ScriptHash{ScriptHash: "00000000000000a1"}
			}
			resp, err := r.run.ResultCacheKey(service, req)
			require.NoError(t, err)
			require.Len(t, resp.GetKey(), 64)
			require.Equal(t, "g/results/"+resp.GetKey(), resp.GetResourcePath())
			return resp.GetKey()
		}
		sched1 := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE, "", "u/alice").GetJobToken()
		trig := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_TRIGGER, "", "u/bob").GetJobToken()
		alice2 := mustRecord(policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION, alice, "u/publisher").GetJobToken()
		base := key(direct.GetJobToken(), `{"a":1,"b":{"y":2,"x":[1,"s"]}}`, "")
		require.Equal(t, base, key(direct.GetJobToken(), ` { "b" : {"x":[1,"s"],"y":2}, "a":1 }`, ""), "arg order and spacing")
		require.Equal(t, base, key(alice2, `{"a":1,"b":{"y":2,"x":[1,"s"]}}`, ""), "same viewer, other run")
		require.Equal(t, base, key(child.GetJobToken(), `{"a":1,"b":{"y":2,"x":[1,"s"]}}`, ""), "child inherits the viewer")
		require.NotEqual(t, base, key(session.GetJobToken(), `{"a":1,"b":{"y":2,"x":[1,"s"]}}`, ""), "another viewer")
		require.NotEqual(t, base, key(direct.GetJobToken(), `{"a":2,"b":{"y":2,"x":[1,"s"]}}`, ""), "other args")
		require.NotEqual(t, base, key(direct.GetJobToken(), `{"a":1,"b":{"y":2,"x":[1,"s"]}}`, "u/alice/s"), "other runnable")
		none := key(sched1, `{"a":1}`, "")
		require.Equal(t, none, key(trig, `{"a":1}`, ""), "runs with no viewer share one key")
		require.Equal(t, none, key(anon.GetJobToken(), `{"a":1}`, ""))
		require.NotEqual(t, none, key(direct.GetJobToken(), `{"a":1}`, ""), "a viewer never shares the no-viewer key")
		require.NotEqual(t, key(sched1, `{"n":9007199254740993}`, ""), key(sched1, `{"n":9007199254740992}`, ""), "no float rounding")
		_, err := r.run.ResultCacheKey(service, &policyv1.ResultCacheKeyRequest{JobToken: sched1, Kind: "script",
			Runnable: &policyv1.ResultCacheKeyRequest_Path{Path: "u/alice/s"}, ArgsJson: `{"a":1,"a":2}`})
		requireField(t, err, "args_json")
		// The job token itself may ask for its key (workers hold only that token).
		resp, err := r.run.ResultCacheKey(as(direct.GetJobToken()), &policyv1.ResultCacheKeyRequest{Kind: "script",
			Runnable: &policyv1.ResultCacheKeyRequest_ScriptHash{ScriptHash: "00000000000000a1"}, ArgsJson: `{"a":1,"b":{"y":2,"x":[1,"s"]}}`})
		require.NoError(t, err)
		require.Equal(t, base, resp.GetKey())
	})
}

// TestRequestFieldsNeverReachTheViewer sets every string field of a RecordRun request to a
// victim's email, one at a time, for every origin: the viewer is never the victim.
func TestRequestFieldsNeverReachTheViewer(t *testing.T) {
	r := replicaWith(t, "a")
	member(t, r, "a", "alice", policyv1.Role_ROLE_OPERATOR)
	alice := userToken(t, r, "a", "alice")
	member(t, r, "a", "victim", policyv1.Role_ROLE_ADMIN) // a real member: trusting any field would resolve
	for o := range policyv1.RunOrigin_name {
		origin := policyv1.RunOrigin(o)
		if origin == policyv1.RunOrigin_RUN_ORIGIN_UNSPECIFIED {
			continue
		}
		base := &policyv1.RecordRunRequest{Workspace: "a", PermissionedAs: "u/alice", Origin: origin}
		switch origin {
		case policyv1.RunOrigin_RUN_ORIGIN_DIRECT, policyv1.RunOrigin_RUN_ORIGIN_PREVIEW, policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION:
			base.Credential = alice
		case policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN:
			p, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: nextJob(), PermissionedAs: "u/alice",
				Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
			require.NoError(t, err)
			base.Credential = p.GetJobToken()
		default: // schedules, triggers, anonymous apps, AI tools: no credential
		}
		fields := base.ProtoReflect().Descriptor().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.Kind() != protoreflect.StringKind {
				continue
			}
			t.Run(origin.String()+"/"+string(f.Name()), func(t *testing.T) {
				req := proto.Clone(base).(*policyv1.RecordRunRequest)
				req.JobId = nextJob()
				req.ProtoReflect().Set(f, protoreflect.ValueOfString("victim@x"))
				resp, err := r.run.RecordRun(service, req)
				if err != nil {
					return // refused: nothing recorded
				}
				require.NotEqual(t, "victim@x", resp.GetRun().GetViewerEmail())
			})
		}
	}
}
