package api

import (
	"context"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/defaults"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/policy/internal/builder"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/settings"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// DefaultJobTokenTTL bounds a job token whose run never finishes.
const DefaultJobTokenTTL = 7 * 24 * time.Hour

// Deps are what the handlers use.
type Deps struct {
	Store       *store.Store
	Settings    *settings.Service
	Stream      *stream.Stream
	JobTokenTTL time.Duration
	// CheckBytesInFlight bounds the builder checks running at once in this process, weighted
	// by their documents' bytes (plus checkBaseWeight each); default 64 MiB.
	CheckBytesInFlight int64
	// CheckQueueWait is how long a check waits for room before ResourceExhausted; default 2 s.
	CheckQueueWait time.Duration
	// AuditHasher is the audit trail's keyed hash, for the secrets a handler issues (the
	// trail records only their hash); nil without --audit-key.
	AuditHasher *audit.Hasher
}

// Defaults of the bound on builder checks in flight (see Deps). 64 MiB of documents is about
// 21 checks at the 3 MiB maximum, each costing a small multiple of its size in memory.
const (
	DefaultCheckBytesInFlight = 64 << 20
	DefaultCheckQueueWait     = 2 * time.Second
	checkBaseWeight           = 64 << 10 // so that many tiny checks are bounded too
)

type handlers struct {
	Deps
	checks   *semaphore.Weighted
	checkCap int64
	checker  *builder.Checker // the builder verdict, over the store
}

// Register registers every policy service on gs.
func Register(gs grpc.ServiceRegistrar, d Deps) {
	d.JobTokenTTL = defaults.Positive(d.JobTokenTTL, DefaultJobTokenTTL)
	d.CheckBytesInFlight = defaults.Positive(d.CheckBytesInFlight, DefaultCheckBytesInFlight)
	d.CheckQueueWait = defaults.Positive(d.CheckQueueWait, DefaultCheckQueueWait)
	h := &handlers{Deps: d, checks: semaphore.NewWeighted(d.CheckBytesInFlight), checkCap: d.CheckBytesInFlight,
		checker: &builder.Checker{Store: d.Store, Limits: BuilderLimits}}
	policyv1.RegisterWorkspaceServiceServer(gs, &workspaceServer{h: h})
	policyv1.RegisterCatalogServiceServer(gs, &catalogServer{h: h})
	policyv1.RegisterTagServiceServer(gs, &tagServer{h: h})
	policyv1.RegisterTokenServiceServer(gs, &tokenServer{h: h})
	policyv1.RegisterRunServiceServer(gs, &runServer{h: h})
	policyv1.RegisterSettingsServiceServer(gs, &settingsServer{h: h})
	policyv1.RegisterEventServiceServer(gs, &eventServer{h: h})
	policyv1.RegisterBuilderServiceServer(gs, &builderServer{h: h})
}

// Validators returns the request validators of every policy service.
func Validators() *validate.Registry { return validators() }

// ServiceDescs lists the policy services (tests check rules and validators cover them).
var ServiceDescs = []grpc.ServiceDesc{
	policyv1.WorkspaceService_ServiceDesc, policyv1.CatalogService_ServiceDesc, policyv1.TagService_ServiceDesc,
	policyv1.TokenService_ServiceDesc, policyv1.RunService_ServiceDesc, policyv1.SettingsService_ServiceDesc,
	policyv1.EventService_ServiceDesc, policyv1.BuilderService_ServiceDesc,
}

func (h *handlers) authorize(ctx context.Context, workspace string) (Caller, error) {
	return authorize(ctx, h.Store, workspace)
}

// authorized is the shape of most handlers: authorize the call on workspace, then do the
// work, its domain errors mapped to gRPC status (mapErr) here so that no handler can forget.
// do's answer is dropped when it returns an error, so do may return the two together.
func authorized[R any](ctx context.Context, h *handlers, workspace string, do func() (*R, error)) (*R, error) {
	if _, err := h.authorize(ctx, workspace); err != nil {
		return nil, err
	}
	out, err := do()
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// actingFor authorizes the call on ws and names the member the call is about (see subject).
func (h *handlers) actingFor(ctx context.Context, ws, username string) (Caller, string, error) {
	c, err := h.authorize(ctx, ws)
	if err != nil {
		return Caller{}, "", err
	}
	who, err := subject(c, username)
	if err != nil {
		return Caller{}, "", err
	}
	return c, who, nil
}

// tenancyFor is actingFor, then the named member's tenancy in ws.
func (h *handlers) tenancyFor(ctx context.Context, ws, username string) (rulebook.Tenancy, error) {
	_, who, err := h.actingFor(ctx, ws, username)
	if err != nil {
		return rulebook.Tenancy{}, err
	}
	t, err := h.Store.ResolveTenancy(ctx, ws, store.ByUsername, who)
	if err != nil {
		return rulebook.Tenancy{}, mapErr(err)
	}
	return t, nil
}
