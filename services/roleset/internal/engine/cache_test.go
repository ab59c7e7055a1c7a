package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

func TestCacheInvalidation(t *testing.T) {
	live := true
	c := NewCache(60e9, 1000, func() bool { return live })
	e := &Engine{cache: c}
	conn := Connection{User: "wm_set_x", Kind: KindRoleSet}
	cases := []struct {
		name  string
		event func()
		keeps bool
	}{
		{"no event keeps", func() {}, true},
		{"member event in the workspace drops", func() { e.OnPolicyEvent("member", "ws") }, false},
		{"group event elsewhere keeps", func() { e.OnPolicyEvent("group", "other") }, true},
		{"folder event drops", func() { e.OnPolicyEvent("folder", "ws") }, false},
		{"run end drops", func() { e.OnPolicyEvent("run", "ws") }, false},
		{"token revoke drops", func() { e.OnPolicyEvent("token", "") }, false},
		{"unknown kind drops", func() { e.OnPolicyEvent("workspace", "ws") }, false},
		{"catalog keeps", func() { e.OnPolicyEvent("catalog", "ws") }, true},
		{"own role event drops", e.DropConnections, false},
		{"a stream break drops", e.DropCaches, false},
		{"stream down", func() { live = false }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live = true
			e.DropCaches()
			require.True(t, c.putConn("k", "ws", conn, c.conns.Begin()))
			require.True(t, c.tenancies.Put([2]string{"ws", "a@x"}, tenancy.Identity{Username: "a"}, time.Time{}, c.tenancies.Begin()))
			tc.event()
			_, ok := c.conns.Lookup("k")
			require.Equal(t, tc.keeps, ok)
		})
	}
	t.Run("an answer computed across an invalidation is not stored", func(t *testing.T) {
		live = true
		for name, event := range map[string]func(){
			"member":         func() { e.OnPolicyEvent("member", "other") },
			"run":            func() { e.OnPolicyEvent("run", "other") },
			"own role event": e.DropConnections,
		} {
			tk := c.conns.Begin()
			event() // arrives while the answer is computed
			require.False(t, c.putConn("k2", "ws", conn, tk), name)
			_, ok := c.conns.Lookup("k2")
			require.False(t, ok, name)
		}
	})
	t.Run("nothing is stored while the stream is down", func(t *testing.T) {
		live = false
		c.runs.Put("t", Run{}, time.Time{}, c.runs.Begin())
		live = true
		_, ok := c.runs.Lookup("t")
		require.False(t, ok)
	})
	t.Run("an engine without a cache caches nothing", func(t *testing.T) {
		c := NewCache(time.Minute, 1000, nil)
		require.False(t, c.putConn("k", "ws", conn, c.conns.Begin()))
	})
}

// TestCacheConnFreshness: a set login's entry is served only until its freshUntil (the row is
// then no longer known to be far from a sweep's cutoff), even when the TTL is longer; other
// entries live for the TTL.
func TestCacheConnFreshness(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := NewCache(time.Hour, 1000, func() bool { return true })
	c.conns.SetClock(func() time.Time { return now })
	c.putConn("set", "ws", Connection{User: "wm_set_x", Kind: KindRoleSet, freshUntil: now.Add(time.Minute)}, c.conns.Begin())
	c.putConn("own", "ws", Connection{User: "r", Kind: KindRole}, c.conns.Begin())
	now = now.Add(59 * time.Second)
	_, ok := c.conns.Lookup("set")
	require.True(t, ok)
	now = now.Add(2 * time.Second)
	_, ok = c.conns.Lookup("set")
	require.False(t, ok, "served past freshUntil")
	_, ok = c.conns.Lookup("own")
	require.True(t, ok, "an own login lives for the TTL")
}
