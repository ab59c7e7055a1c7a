package settings

import (
	"context"
	"time"

	"github.com/millwright/millwright/pkg/billingclient"
	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// DefaultTTL is the builder-flag cache lifetime (spec: 60 s cache).
const DefaultTTL = 60 * time.Second

// SeatChecker prices changes that may add seats (billing wires it, pkg/billingclient):
// turning builder rights on, and writing a member (a new developer, an operator promoted, a
// member re-enabled). streamPos is the policy stream position the decision must reflect: the
// projection answering it must have applied at least that event. A non-nil error refuses the
// change and is returned to the caller as is (a status error such as SEAT_CAP_EXCEEDED, or a
// failure to decide).
type SeatChecker interface {
	CheckBuilderEnable(ctx context.Context, workspace string, streamPos int64) error
	CheckMember(ctx context.Context, m billingclient.MemberChange, streamPos int64) error
}

// Store is what the service needs from the database.
type Store interface {
	OperatorSettings(ctx context.Context, ws string) (rulebook.OperatorSettings, error)
	UpdateOperatorSettings(ctx context.Context, ws string, patch rulebook.SettingsPatch,
		enable func(ctx context.Context, head int64) error) (store.OperatorSettingsChange, error)
}

// Service owns operator settings changes and the builder cache.
type Service struct {
	store Store
	seats SeatChecker // nil: no seat check
	cache *revcache.Cache[string, rulebook.OperatorSettings]
}

// New returns a Service. ttl <= 0 means DefaultTTL. live reports whether the stream listener
// is connected and caught up, so that an entry filled now will be dropped by any later change;
// nil means never (nothing is cached).
func New(st Store, seats SeatChecker, ttl time.Duration, live func() bool) *Service {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Service{store: st, seats: seats,
		cache: revcache.New[string, rulebook.OperatorSettings](revcache.Options{TTL: ttl, MaxEntries: 1000, Live: live})}
}

// Cache exposes the cache (tests set its clock).
func (s *Service) Cache() *revcache.Cache[string, rulebook.OperatorSettings] { return s.cache }

// Get returns the stored settings, uncached (what an admin reads and edits).
func (s *Service) Get(ctx context.Context, ws string) (rulebook.OperatorSettings, error) {
	return s.store.OperatorSettings(ctx, ws)
}

// Cached returns the settings through the per-process cache.
func (s *Service) Cached(ctx context.Context, ws string) (rulebook.OperatorSettings, error) {
	// The cache must be live when the load begins: every change committed after the load's
	// read is then delivered, and a delivery racing the fill is caught by the generation check.
	return s.cache.Get(ctx, ws, func(ctx context.Context) (rulebook.OperatorSettings, time.Time, error) {
		v, err := s.store.OperatorSettings(ctx, ws)
		return v, time.Time{}, err
	})
}

// CanBuild is check_operator_can_build over the cached flag.
func (s *Service) CanBuild(ctx context.Context, ws string, role rulebook.Role) error {
	if role == rulebook.RoleAdmin || role == rulebook.RoleDeveloper {
		return nil
	}
	st, err := s.Cached(ctx, ws)
	if err != nil {
		return err
	}
	return rulebook.CanBuild(role, st)
}

// Update is the only way operator settings change: every RPC that sets them (today
// UpdateOperatorSettings; any future import or git-sync path) must call it. Turning builder on
// is priced by the SeatChecker inside the store's transaction, at the stream head, before the
// store writes the merged patch; its trigger emits the "settings" event. The local entry is
// dropped at once; other replicas drop theirs when the event arrives.
func (s *Service) Update(ctx context.Context, ws string, patch rulebook.SettingsPatch) (store.OperatorSettingsChange, error) {
	var enable func(ctx context.Context, head int64) error
	if s.seats != nil {
		enable = func(ctx context.Context, head int64) error { return s.seats.CheckBuilderEnable(ctx, ws, head) }
	}
	ch, err := s.store.UpdateOperatorSettings(ctx, ws, patch, enable)
	if err != nil {
		return ch, err
	}
	s.cache.Invalidate(ws)
	return ch, nil
}

// MemberCheck is the seat check of writing member m, for the store's member writes
// (store.UpsertMember, store.CreateWorkspace), which call it inside their transaction, under the
// seat lock and at the stream head, only when the write may add seats. nil when no seat checker
// is configured (development only: no cap to price), as for builder-on in Update.
func (s *Service) MemberCheck(m store.Member) func(ctx context.Context, head int64) error {
	if s.seats == nil {
		return nil
	}
	change := billingclient.MemberChange{Workspace: m.Workspace, Username: m.Username, Email: m.Email,
		Role: string(m.Role), Disabled: m.Disabled}
	return func(ctx context.Context, head int64) error { return s.seats.CheckMember(ctx, change, head) }
}

// OnEvent is the stream subscriber: a "settings" event drops that workspace's entry; a resync
// (the listener fell behind retention) drops everything.
func (s *Service) OnEvent(e stream.Event) {
	switch {
	case e.Op == stream.OpResync:
		s.cache.Purge()
	case e.Kind == "settings":
		s.cache.Invalidate(e.Workspace)
	}
}
