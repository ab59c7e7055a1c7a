package e2e

// This file replays the data-table connection decisions of testdata/roleset_decisions.json
// (reference and agent forms, viewer and named roles, malformed input, tenancy traces) against
// one real stack and its demo. Every case goes through ResolveConnection and ExplainConnection,
// each over gRPC (straight to roleset, with the job token as bearer metadata) and over REST
// (through the gateway), and must match the fixture; both transports must reach the identical
// decision (code, message, ErrorInfo, connection, roles, trace; the password only as "one was
// sent"); and Explain must agree with Resolve.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

const rolesetDecisionsFile = "testdata/roleset_decisions.json"

type rsFixtures struct {
	About string           `json:"about"`
	Runs  map[string]rsRun `json:"runs"`
	Cases []rsCase         `json:"cases"`
}

// rsRun says where a case's bearer token comes from: a token file of the stack (TokenFile), a
// literal (Token), or a run recorded now with the service token (Origin, Owner and optionally
// the owner's session token file as the credential).
type rsRun struct {
	TokenFile      string `json:"token_file"`
	Token          string `json:"token"`
	Origin         string `json:"origin"`
	Owner          string `json:"owner"`
	CredentialFile string `json:"credential_file"`
}

type rsCase struct {
	Name      string `json:"name"`
	Run       string `json:"run"`
	Reference string `json:"reference"`
	Datatable string `json:"datatable"`
	Role      string `json:"role"`
	Want      rsWant `json:"want"`
}

type rsWant struct {
	Code    string     `json:"code"`
	HTTP    int        `json:"http"`
	Reason  string     `json:"reason"`
	Rule    string     `json:"rule"`
	Field   string     `json:"field"`
	Roles   []string   `json:"roles"`
	Kind    string     `json:"kind"`
	User    string     `json:"user"`
	Subject string     `json:"subject"`
	Trace   *[]rsTrace `json:"trace"`
}

type rsTrace struct {
	Role    string `json:"role"`
	Tenant  string `json:"tenant"`
	Matched bool   `json:"matched"`
	Reason  string `json:"reason"`
}

// rsDetail is one status detail: an ErrorInfo in full, anything else by type only.
type rsDetail struct {
	Type, Reason, Domain string
	Metadata             map[string]string
}

// rsStatus is a refusal as both transports carry it (a google.rpc.Status).
type rsStatus struct {
	Code    codes.Code
	Message string
	Details []rsDetail
}

// rsResolved is one transport's ResolveConnection answer with the password reduced to whether
// one was sent: credentials are never compared.
type rsResolved struct {
	Err      *rsStatus
	Host     string
	Port     int32
	Database string
	User     string
	Roles    []string
	Kind     rolesetv1.ConnectionKind
	Password bool
}

// rsExplained is one transport's ExplainConnection answer: a response or a refused call.
type rsExplained struct {
	Err  *rsStatus
	Resp *rolesetv1.ExplainConnectionResponse
}

// rsSeen is what a transport sent back, raw, for the credential checks done once every case
// has run.
type rsSeen struct {
	name, what string
	body       string
	refusal    bool
	password   string // the credential handed out, if any
	kind       rolesetv1.ConnectionKind
}

func loadRolesetDecisions(t *testing.T) rsFixtures {
	t.Helper()
	var fx rsFixtures
	readStrict(t, rolesetDecisionsFile, &fx)
	names := map[string]bool{}
	for _, c := range fx.Cases {
		require.NotEmpty(t, c.Name)
		require.False(t, names[c.Name], "duplicate case name %q", c.Name)
		names[c.Name] = true
		require.Contains(t, fx.Runs, c.Run, "case %q: unknown run", c.Name)
		_, ok := rsCodeByName(c.Want.Code)
		require.True(t, ok, "case %q: unknown code %q", c.Name, c.Want.Code)
		require.NotZero(t, c.Want.HTTP, "case %q: no http status", c.Name)
		if c.Want.Code == "OK" {
			require.NotEmpty(t, c.Want.Roles, "case %q: an allowed case names its roles", c.Name)
			require.NotEmpty(t, c.Want.Kind, "case %q: an allowed case names its kind", c.Name)
			require.NotEmpty(t, c.Want.Subject, "case %q: an allowed case names its subject", c.Name)
		} else {
			require.NotEmpty(t, c.Want.Reason, "case %q: a refusal names its reason", c.Name)
		}
	}
	return fx
}

func rsCodeByName(name string) (codes.Code, bool) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c, true
		}
	}
	return 0, false
}

func rsStatusOf(p *spb.Status) *rsStatus {
	s := &rsStatus{Code: codes.Code(p.GetCode()), Message: p.GetMessage(), Details: []rsDetail{}}
	for _, a := range p.GetDetails() {
		d := rsDetail{Type: a.GetTypeUrl()}
		var info errdetails.ErrorInfo
		if a.MessageIs(&info) && a.UnmarshalTo(&info) == nil {
			d.Reason, d.Domain, d.Metadata = info.GetReason(), info.GetDomain(), info.GetMetadata()
		}
		s.Details = append(s.Details, d)
	}
	return s
}

// info returns the status's millwright ErrorInfo (exactly one is required of a refusal).
func (s *rsStatus) info(t *testing.T) rsDetail {
	t.Helper()
	var out []rsDetail
	for _, d := range s.Details {
		if d.Domain == errs.Domain {
			out = append(out, d)
		}
	}
	require.Len(t, out, 1, "a refusal carries exactly one millwright ErrorInfo: %+v", s)
	return out[0]
}

type rsClient struct {
	conn *grpc.ClientConn
	st   *Stack
}

func (c *rsClient) ctx(token string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), cancel
}

func (c *rsClient) post(t *testing.T, route, token string, req proto.Message) (int, []byte) {
	t.Helper()
	return c.st.Do(t, http.MethodPost, route, token, req)
}

// rsRESTStatus reads a REST error body (grpc-gateway writes the google.rpc.Status as JSON).
func rsRESTStatus(t *testing.T, raw []byte) *rsStatus {
	t.Helper()
	var p spb.Status
	require.NoError(t, protojson.Unmarshal(raw, &p), "%s", raw)
	return rsStatusOf(&p)
}

func rsGRPCStatus(err error) *rsStatus {
	st, _ := status.FromError(err)
	return rsStatusOf(st.Proto())
}

// rsResolvedOf reads an answer. In proxy mode (the demo's) the user is a ticket: it logs in
// through roleset's proxy with TLS, and User is the login the session has upstream
// (current_user), what the fixture names, so every successful case also proves the ticket works.
func rsResolvedOf(t *testing.T, r *rolesetv1.ResolveConnectionResponse) rsResolved {
	t.Helper()
	res := rsResolved{Host: r.GetHost(), Port: r.GetPort(), Database: r.GetDatabase(), User: r.GetUser(),
		Roles: r.GetRoles(), Kind: r.GetKind(), Password: r.GetPassword() != ""}
	if r.GetCredentialMode() != rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY {
		return res
	}
	require.Regexp(t, `^t_[a-z2-7]{26}$`, r.GetUser(), "a proxy answer's user is a ticket id")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := url.URL{Scheme: "postgres", User: url.UserPassword(r.GetUser(), r.GetPassword()),
		Host: net.JoinHostPort(r.GetHost(), strconv.Itoa(int(r.GetPort()))), Path: "/" + r.GetDatabase(), RawQuery: "sslmode=require"}
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err, "the ticket logs in through the proxy")
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&res.User))
	return res
}

func (c *rsClient) resolveGRPC(t *testing.T, token string, req *rolesetv1.ResolveConnectionRequest) (rsResolved, rsSeen) {
	t.Helper()
	ctx, cancel := c.ctx(token)
	defer cancel()
	resp, err := rolesetv1.NewConnectionServiceClient(c.conn).ResolveConnection(ctx, req)
	if err != nil {
		st := rsGRPCStatus(err)
		p, _ := status.FromError(err)
		raw, _ := proto.Marshal(p.Proto())
		return rsResolved{Err: st}, rsSeen{what: "gRPC resolve", body: p.Message() + string(raw), refusal: true}
	}
	return rsResolvedOf(t, resp), rsSeen{what: "gRPC resolve", password: resp.GetPassword(), kind: resp.GetKind()}
}

func (c *rsClient) resolveREST(t *testing.T, token string, req *rolesetv1.ResolveConnectionRequest) (int, rsResolved, rsSeen) {
	t.Helper()
	code, raw := c.post(t, "/v1/roleset/connections:resolve", token, req)
	seen := rsSeen{what: "REST resolve", body: string(raw)}
	if code != http.StatusOK {
		seen.refusal = true
		return code, rsResolved{Err: rsRESTStatus(t, raw)}, seen
	}
	var resp rolesetv1.ResolveConnectionResponse
	require.NoError(t, protojson.Unmarshal(raw, &resp), "%s", raw)
	seen.password, seen.kind = resp.GetPassword(), resp.GetKind()
	return code, rsResolvedOf(t, &resp), seen
}

func (c *rsClient) explainGRPC(t *testing.T, token string, req *rolesetv1.ExplainConnectionRequest) (rsExplained, rsSeen) {
	t.Helper()
	ctx, cancel := c.ctx(token)
	defer cancel()
	resp, err := rolesetv1.NewConnectionServiceClient(c.conn).ExplainConnection(ctx, req)
	seen := rsSeen{what: "gRPC explain", refusal: true}
	if err != nil {
		p, _ := status.FromError(err)
		raw, _ := proto.Marshal(p.Proto())
		seen.body = p.Message() + string(raw)
		return rsExplained{Err: rsGRPCStatus(err)}, seen
	}
	raw, _ := proto.Marshal(resp)
	seen.body = string(raw)
	return rsExplained{Resp: resp}, seen
}

func (c *rsClient) explainREST(t *testing.T, token string, req *rolesetv1.ExplainConnectionRequest) (int, rsExplained, rsSeen) {
	t.Helper()
	code, raw := c.post(t, "/v1/roleset/connections:explain", token, req)
	seen := rsSeen{what: "REST explain", body: string(raw), refusal: true}
	if code != http.StatusOK {
		return code, rsExplained{Err: rsRESTStatus(t, raw)}, seen
	}
	var resp rolesetv1.ExplainConnectionResponse
	require.NoError(t, protojson.Unmarshal(raw, &resp), "%s", raw)
	return code, rsExplained{Resp: &resp}, seen
}

// rsRecordRun records a run the way the platform does (REST, service token; the owner's own
// session token as the credential when there is one) and returns its job token.
func rsRecordRun(t *testing.T, st *Stack, service, origin, owner, credential string) string {
	t.Helper()
	id := make([]byte, 16)
	_, err := rand.Read(id)
	require.NoError(t, err)
	h := hex.EncodeToString(id)
	body := map[string]any{"job_id": h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:],
		"permissioned_as": owner, "origin": origin}
	if credential != "" {
		body["credential"] = credential
	}
	code, raw := st.Do(t, http.MethodPost, "/v1/workspaces/demo/runs", service, body)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var out struct {
		JobToken string `json:"job_token"`
	}
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	require.NotEmpty(t, out.JobToken, "%s", raw)
	return out.JobToken
}

// rsCheckRefusal checks a refusal against the case: code, reason and (for malformed input) the
// rule and field the ErrorInfo names.
func rsCheckRefusal(t *testing.T, w rsWant, code codes.Code, s *rsStatus, what string) {
	t.Helper()
	require.NotNil(t, s, "%s: expected a refusal", what)
	assert.Equal(t, code, s.Code, "%s: %+v", what, s)
	assert.NotEmpty(t, s.Message, what)
	info := s.info(t)
	assert.Equal(t, "ERROR_REASON_"+w.Reason, info.Reason, "%s: %+v", what, s)
	if w.Rule != "" || w.Field != "" {
		assert.Equal(t, w.Rule, info.Metadata["rule"], "%s: rule: %+v", what, s)
		assert.Equal(t, w.Field, info.Metadata["field"], "%s: field: %+v", what, s)
	}
}

func rsTraceOf(r *rolesetv1.ExplainConnectionResponse) []rsTrace {
	out := []rsTrace{}
	for _, e := range r.GetTrace() {
		reason, _, _ := strings.Cut(e.GetNote(), ":")
		out = append(out, rsTrace{Role: e.GetRole(), Tenant: e.GetTenant(), Matched: e.GetMatched(), Reason: reason})
	}
	return out
}

// TestRolesetDecisions replays testdata/roleset_decisions.json over gRPC and REST against one
// stack (see the top of this file).
func TestRolesetDecisions(t *testing.T) {
	needsStack(t)
	fx := loadRolesetDecisions(t)
	require.GreaterOrEqual(t, len(fx.Cases), 30)
	st := StartStack(t)
	service := st.Token(t, "service-token")
	conn, err := grpc.NewClient(st.Roleset, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := &rsClient{conn: conn, st: st}

	tokens := map[string]string{}
	for name, r := range fx.Runs {
		switch {
		case r.Token != "":
			tokens[name] = r.Token
		case r.TokenFile != "":
			tokens[name] = st.Token(t, r.TokenFile)
		default:
			require.NotEmpty(t, r.Origin, "run %q: no token, token_file or origin", name)
			cred := ""
			if r.CredentialFile != "" {
				cred = st.Token(t, r.CredentialFile)
			}
			tokens[name] = rsRecordRun(t, st, service, r.Origin, r.Owner, cred)
		}
	}

	var seen []rsSeen
	for _, tc := range fx.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			w := tc.Want
			code, _ := rsCodeByName(w.Code)
			token := tokens[tc.Run]
			rreq := &rolesetv1.ResolveConnectionRequest{Reference: tc.Reference, Datatable: tc.Datatable, Role: tc.Role}
			ereq := &rolesetv1.ExplainConnectionRequest{Reference: tc.Reference, Datatable: tc.Datatable, Role: tc.Role}

			// ResolveConnection, REST then gRPC, each against the fixture.
			httpCode, rest, restSeen := c.resolveREST(t, token, rreq)
			g, grpcSeen := c.resolveGRPC(t, token, rreq)
			for _, s := range []*rsSeen{&restSeen, &grpcSeen} {
				s.name = tc.Name
				seen = append(seen, *s)
			}
			assert.Equal(t, w.HTTP, httpCode, "REST status: %s", restSeen.body)
			for _, x := range []struct {
				what string
				r    rsResolved
				seen rsSeen
			}{{"REST resolve", rest, restSeen}, {"gRPC resolve", g, grpcSeen}} {
				if code != codes.OK {
					rsCheckRefusal(t, w, code, x.r.Err, x.what)
					assert.False(t, x.r.Password, "%s: a refusal carries no password", x.what)
					assert.NotContains(t, strings.ToLower(x.seen.body), "password", "%s: %s", x.what, x.seen.body)
					continue
				}
				require.Nil(t, x.r.Err, "%s: refused: %+v", x.what, x.r.Err)
				assert.True(t, x.r.Password, "%s: an allowed connection carries a password", x.what)
				assert.Equal(t, w.Roles, x.r.Roles, x.what)
				assert.Equal(t, "CONNECTION_KIND_"+w.Kind, x.r.Kind.String(), x.what)
				if w.User != "" {
					assert.Equal(t, w.User, x.r.User, x.what)
				}
				assert.NotEmpty(t, x.r.Host, x.what)
				assert.NotZero(t, x.r.Port, x.what)
				assert.Equal(t, "millwright_demo", x.r.Database, x.what)
			}
			assert.Equal(t, g, rest, "REST and gRPC must reach the same ResolveConnection decision")

			// ExplainConnection, REST then gRPC: the same decision, with the trace, no credential.
			ehttp, erest, erestSeen := c.explainREST(t, token, ereq)
			eg, egSeen := c.explainGRPC(t, token, ereq)
			for _, s := range []*rsSeen{&erestSeen, &egSeen} {
				s.name = tc.Name
				seen = append(seen, *s)
			}
			for _, x := range []rsExplained{erest, eg} {
				if x.Resp != nil {
					assert.NotContains(t, protojson.Format(x.Resp), "password")
				}
			}
			switch code {
			case codes.OK, codes.PermissionDenied:
				// A decision: Explain answers 200 and says what Resolve did.
				assert.Equal(t, http.StatusOK, ehttp, "REST explain: %s", erestSeen.body)
				for _, x := range []struct {
					what string
					e    rsExplained
				}{{"REST explain", erest}, {"gRPC explain", eg}} {
					require.Nil(t, x.e.Err, "%s: the call failed: %+v", x.what, x.e.Err)
					r := x.e.Resp
					assert.Equal(t, code == codes.OK, r.GetAllowed(), x.what)
					if code == codes.OK {
						assert.Equal(t, "ERROR_REASON_UNSPECIFIED", r.GetReason().String(), x.what)
						assert.Equal(t, w.Roles, r.GetRoles(), x.what)
						assert.Equal(t, "CONNECTION_KIND_"+w.Kind, r.GetKind().String(), x.what)
						assert.Equal(t, g.User, r.GetUser(), "%s: the login Resolve handed out", x.what)
						assert.Equal(t, w.Subject, r.GetSubject(), x.what)
					} else {
						assert.Equal(t, "ERROR_REASON_"+w.Reason, r.GetReason().String(), x.what)
						assert.NotEmpty(t, r.GetMessage(), x.what)
						assert.Empty(t, r.GetUser(), x.what)
						assert.Empty(t, r.GetRoles(), x.what)
						assert.Empty(t, r.GetSubject(), x.what)
					}
					if w.Trace != nil {
						assert.Equal(t, *w.Trace, rsTraceOf(r), "%s: trace", x.what)
					}
				}
				if erest.Resp != nil && eg.Resp != nil {
					assert.True(t, proto.Equal(eg.Resp, erest.Resp),
						"REST and gRPC must explain the same decision:\ngRPC %v\nREST %v", eg.Resp, erest.Resp)
				}
			default:
				// Bad input, unknown data table or role, refused token: the call fails as Resolve's.
				assert.Equal(t, w.HTTP, ehttp, "REST explain: %s", erestSeen.body)
				rsCheckRefusal(t, w, code, erest.Err, "REST explain")
				rsCheckRefusal(t, w, code, eg.Err, "gRPC explain")
				assert.Equal(t, eg, erest, "REST and gRPC must refuse the Explain call alike")
				assert.Equal(t, g.Err, eg.Err, "Explain must refuse as Resolve does")
			}
		})
	}

	// No credential handed out anywhere may appear in a refusal or an explanation, nor may the
	// data table's admin password reach anything but an ADMIN connection.
	t.Run("no credential in refusals or explanations", func(t *testing.T) {
		adminPassword := st.Token(t, "demo-admin-password")
		require.NotEmpty(t, adminPassword)
		secrets := map[string]string{adminPassword: "the demo admin password"}
		allowed := 0
		for _, s := range seen {
			if s.password != "" {
				allowed++
				secrets[s.password] = fmt.Sprintf("the password handed out to %q (%s)", s.name, s.what)
				if s.kind != rolesetv1.ConnectionKind_CONNECTION_KIND_ADMIN {
					assert.NotEqual(t, adminPassword, s.password, "%q (%s): a %s login with the admin password", s.name, s.what, s.kind)
				}
			}
		}
		require.Positive(t, allowed, "no allowed case ran")
		refusals := 0
		for _, s := range seen {
			if !s.refusal {
				continue
			}
			refusals++
			for secret, what := range secrets {
				assert.NotContains(t, s.body, secret, "%q (%s) carries %s", s.name, s.what, what)
			}
		}
		require.Positive(t, refusals, "no refusal or explanation was seen")
	})
}
