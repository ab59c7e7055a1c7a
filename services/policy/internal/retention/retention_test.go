package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/retention"
	"github.com/millwright/millwright/services/policy/internal/store"
)

type fakeStore struct{ at []time.Time }

func (f *fakeStore) Maintain(_ context.Context, now time.Time, _ store.Retention) (store.MaintainResult, error) {
	f.at = append(f.at, now)
	return store.MaintainResult{}, nil
}

func TestRunRetentionMustOutliveJobTokens(t *testing.T) {
	f := &fakeStore{}
	m := retention.Maintainer{Store: f, JobTokenTTL: 7 * 24 * time.Hour, Interval: time.Hour, Clock: time.Now,
		Retention: store.Retention{Runs: 7 * 24 * time.Hour, Tokens: time.Hour, PartitionDays: 7, Ahead: time.Hour}}
	require.ErrorContains(t, m.Check(), "job token lifetime")
	_, err := m.Once(context.Background())
	require.Error(t, err)
	require.Error(t, m.Run(context.Background()), "the service does not start with it")
	require.Empty(t, f.at, "nothing removed under a retention that could drop a live run")

	m.Retention.Runs = 8 * 24 * time.Hour
	require.NoError(t, m.Check())
	m.Retention.Tokens = 0
	require.Error(t, m.Check())
}

func TestPassesUseTheInjectedClock(t *testing.T) {
	f := &fakeStore{}
	at := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	m := retention.Maintainer{Store: f, JobTokenTTL: time.Hour, Interval: time.Hour, Clock: func() time.Time { return at },
		Retention: store.Retention{Runs: 2 * 24 * time.Hour, Tokens: time.Hour, PartitionDays: 1, Ahead: time.Hour}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run still makes its first pass, then returns
	require.NoError(t, m.Run(ctx))
	require.Equal(t, []time.Time{at}, f.at, "one pass at start, at the clock's time")
}

type failingStore struct{}

func (failingStore) Maintain(context.Context, time.Time, store.Retention) (store.MaintainResult, error) {
	return store.MaintainResult{}, context.DeadlineExceeded
}

func TestPassesAreCounted(t *testing.T) {
	at := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	m := &retention.Maintainer{Store: &fakeStore{}, JobTokenTTL: time.Hour, Interval: time.Hour, Clock: func() time.Time { return at },
		Retention: store.Retention{Runs: 2 * 24 * time.Hour, Tokens: time.Hour, PartitionDays: 7, Ahead: time.Hour}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	_, err := m.Once(context.Background())
	require.NoError(t, err)
	m.Store = failingStore{}
	_, err = m.Once(context.Background())
	require.Error(t, err)

	got := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			name := f.GetName()
			for _, l := range metric.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = metric.GetCounter().GetValue() + metric.GetGauge().GetValue()
		}
	}
	require.Equal(t, map[string]float64{
		"millwright_policy_retention_passes_total/ok":             1,
		"millwright_policy_retention_passes_total/skipped":        0,
		"millwright_policy_retention_passes_total/failed":         1,
		"millwright_policy_retention_last_pass_timestamp_seconds": float64(at.Unix()),
	}, got)
}
