package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

func TestCacheInvalidation(t *testing.T) {
	live := true
	c := NewCache(60e9, 1000, func() bool { return live })
	conn := Connection{User: "wm_set_x", Kind: KindRoleSet}
	cases := []struct {
		name  string
		event func()
		keeps bool
	}{
		{"no event keeps", func() {}, true},
		{"member event in the workspace drops", func() { c.OnPolicyEvent("member", "ws") }, false},
		{"group event elsewhere keeps", func() { c.OnPolicyEvent("group", "other") }, true},
		{"folder event drops", func() { c.OnPolicyEvent("folder", "ws") }, false},
		{"run end drops", func() { c.OnPolicyEvent("run", "ws") }, false},
		{"token revoke drops", func() { c.OnPolicyEvent("token", "") }, false},
		{"unknown kind drops", func() { c.OnPolicyEvent("workspace", "ws") }, false},
		{"catalog keeps", func() { c.OnPolicyEvent("catalog", "ws") }, true},
		{"own role event drops", c.DropConns, false},
		{"stream down", func() { live = false }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live = true
			c.DropAll()
			c.PutConn("k", "ws", conn, c.Gen())
			c.PutTenancy("ws", "a@x", tenancy.Identity{Username: "a"}, c.Gen())
			tc.event()
			_, ok := c.Conn("k")
			require.Equal(t, tc.keeps, ok)
		})
	}
	t.Run("an answer computed across an invalidation is not stored", func(t *testing.T) {
		live = true
		gen := c.Gen()
		c.OnPolicyEvent("member", "ws") // arrives while the answer is computed
		c.PutConn("k2", "ws", conn, gen)
		_, ok := c.Conn("k2")
		require.False(t, ok)
	})
	t.Run("nothing is stored while the stream is down", func(t *testing.T) {
		live = false
		c.PutRun("t", Run{}, c.Gen())
		live = true
		_, ok := c.Run("t")
		require.False(t, ok)
	})
}

// TestCacheConnFreshness: a set login's entry is served only until its freshUntil (the row is
// then no longer known to be far from a sweep's cutoff), even when the TTL is longer; other
// entries live for the TTL.
func TestCacheConnFreshness(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := NewCache(time.Hour, 1000, func() bool { return true })
	c.now = func() time.Time { return now }
	c.PutConn("set", "ws", Connection{User: "wm_set_x", Kind: KindRoleSet, freshUntil: now.Add(time.Minute)}, c.Gen())
	c.PutConn("own", "ws", Connection{User: "r", Kind: KindRole}, c.Gen())
	now = now.Add(59 * time.Second)
	_, ok := c.Conn("set")
	require.True(t, ok)
	now = now.Add(2 * time.Second)
	_, ok = c.Conn("set")
	require.False(t, ok, "served past freshUntil")
	_, ok = c.Conn("own")
	require.True(t, ok, "an own login lives for the TTL")
}
