package settings_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/settings"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// memStore is an in-memory settings table; it stands in for the database only to test the
// cache's two ends in isolation (the integration tests run them against Postgres).
type memStore struct {
	mu    sync.Mutex
	s     map[string]rulebook.OperatorSettings
	reads int
}

func (m *memStore) OperatorSettings(_ context.Context, ws string) (rulebook.OperatorSettings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	return m.s[ws], nil
}

// set changes the row behind the service's back, as another replica would.
func (m *memStore) set(ws string, builder bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.s[ws]
	v.Builder = builder
	m.s[ws] = v
}

func (m *memStore) UpdateOperatorSettings(ctx context.Context, ws string, p rulebook.SettingsPatch,
	enable func(context.Context, int64) error) (store.OperatorSettingsChange, error) {
	if cur, _ := m.OperatorSettings(ctx, ws); p["builder"] && !cur.Builder && enable != nil {
		if err := enable(ctx, 7); err != nil {
			return store.OperatorSettingsChange{}, err
		}
	}
	m.set(ws, p["builder"])
	return store.OperatorSettingsChange{}, nil
}

func TestBuilderCacheEnds(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// after turning builder off elsewhere, what happens before asking again
		step       func(svc *settings.Service, clock *time.Time)
		wantRefuse bool
	}{
		{"no event, within the TTL: the cache answers (the spec's 60 s bound)", func(_ *settings.Service, c *time.Time) {
			*c = c.Add(59 * time.Second)
		}, false},
		{"no event, TTL passed: reloaded", func(_ *settings.Service, c *time.Time) {
			*c = c.Add(61 * time.Second)
		}, true},
		{"settings event: dropped at once", func(s *settings.Service, _ *time.Time) {
			s.OnEvent(stream.Event{ID: 9, Kind: "settings", Workspace: "w", Op: "update"})
		}, true},
		{"event of another workspace: kept", func(s *settings.Service, _ *time.Time) {
			s.OnEvent(stream.Event{ID: 9, Kind: "settings", Workspace: "other", Op: "update"})
		}, false},
		{"resync: everything dropped", func(s *settings.Service, _ *time.Time) {
			s.OnEvent(stream.Event{ID: 9, Op: stream.OpResync})
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &memStore{s: map[string]rulebook.OperatorSettings{"w": {Builder: true}}}
			svc := settings.New(st, nil, 0, func() bool { return true })
			clock := time.Unix(1000, 0)
			svc.Cache().SetClock(func() time.Time { return clock })
			require.NoError(t, svc.CanBuild(ctx, "w", rulebook.RoleOperator))
			st.set("w", false)
			tc.step(svc, &clock)
			err := svc.CanBuild(ctx, "w", rulebook.RoleOperator)
			if tc.wantRefuse {
				require.ErrorIs(t, err, rulebook.ErrBuilderOff)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestNothingCachedUntilLive(t *testing.T) {
	st := &memStore{s: map[string]rulebook.OperatorSettings{"w": {Builder: true}}}
	live := false
	svc := settings.New(st, nil, 0, func() bool { return live })
	_, _ = svc.Cached(context.Background(), "w")
	_, _ = svc.Cached(context.Background(), "w")
	require.Equal(t, 2, st.reads, "not cached while the stream is not connected")
	live = true
	_, _ = svc.Cached(context.Background(), "w")
	_, _ = svc.Cached(context.Background(), "w")
	require.Equal(t, 3, st.reads)
}

func TestDevelopersAndAdminsAlwaysBuild(t *testing.T) {
	st := &memStore{s: map[string]rulebook.OperatorSettings{}}
	svc := settings.New(st, nil, 0, nil)
	require.NoError(t, svc.CanBuild(context.Background(), "w", rulebook.RoleAdmin))
	require.NoError(t, svc.CanBuild(context.Background(), "w", rulebook.RoleDeveloper))
	require.ErrorIs(t, svc.CanBuild(context.Background(), "w", rulebook.RoleOperator), rulebook.ErrBuilderOff)
	require.Error(t, svc.CanBuild(context.Background(), "w", rulebook.Role("")))
}

// TestNilLiveNeverCaches: a service built without a stream to vouch for its entries reads
// through every time (it used to mean "always live": a revoke would then wait for the TTL).
func TestNilLiveNeverCaches(t *testing.T) {
	st := &memStore{s: map[string]rulebook.OperatorSettings{"w": {Builder: true}}}
	svc := settings.New(st, nil, 0, nil)
	require.NoError(t, svc.CanBuild(context.Background(), "w", rulebook.RoleOperator))
	st.set("w", false)
	require.ErrorIs(t, svc.CanBuild(context.Background(), "w", rulebook.RoleOperator), rulebook.ErrBuilderOff)
	require.Equal(t, 2, st.reads)
}
