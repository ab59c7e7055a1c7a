package itest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/engine"
)

// pauser holds a replica at one Config.Step point: hook blocks the first caller that reaches
// the armed step until release.
type pauser struct {
	mu      sync.Mutex
	at      string
	reached chan struct{}
	release chan struct{}
}

func (p *pauser) arm(step string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at, p.reached, p.release = step, make(chan struct{}), make(chan struct{})
}

func (p *pauser) hook(step string) {
	p.mu.Lock()
	match := step != "" && step == p.at
	if match {
		p.at = ""
	}
	reached, release := p.reached, p.release
	p.mu.Unlock()
	if match {
		close(reached)
		<-release
	}
}

// interleave runs first until it reaches step (paused by p), then runs second while first
// waits there, then lets first go on. second may block on a lock first holds: it gets a
// moment, then first is released and both finish. It reports whether step was reached.
func interleave(t *testing.T, p *pauser, step string, first, second func()) bool {
	t.Helper()
	p.arm(step)
	firstDone := make(chan struct{})
	go func() { defer close(firstDone); first() }()
	reached := false
	select {
	case <-p.reached:
		reached = true
	case <-firstDone:
	}
	secondDone := make(chan struct{})
	go func() { defer close(secondDone); second() }()
	if reached {
		select {
		case <-secondDone:
		case <-time.After(500 * time.Millisecond): // second waits on first's lock
		}
		close(p.release)
	}
	for _, ch := range []chan struct{}{firstDone, secondDone} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("interleaving deadlocked")
		}
	}
	return reached
}

// TestSweepNeverDropsWhatAResolveHandsOut: a resolve on one replica and a sweep on another,
// the set login's last_used_at 31 days old, interleaved at every step of each, in both orders.
// Whatever a resolve hands out still logs in once both are done, and its row exists: a sweep
// never drops a login that a resolve handed out after the sweep began. (Before the fix, the
// fast path read the stale row, the sweep dropped the login, the touch updated nothing and the
// dropped login's password was handed out.)
func TestSweepNeverDropsWhatAResolveHandsOut(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var rp, sp pauser
	res := f.start(func(c *engine.Config) { c.Step = rp.hook })
	sw := f.start(func(c *engine.Config) { c.Step = sp.hook })
	viewer := "carol@x"

	stale := func(t *testing.T) {
		t.Helper()
		f.makeStale(t, f.resolveSet(t, f.r, viewer).GetUser())
		res.eng.DropCaches()
	}
	check := func(t *testing.T, c *rolesetv1.ResolveConnectionResponse, err error) {
		t.Helper()
		require.NoError(t, err)
		require.NoError(t, f.canLogin(c.GetUser(), c.GetPassword()), "the login handed out no longer logs in")
		row, ok := f.setLogins(t)[c.GetUser()]
		require.True(t, ok, "the login handed out has no row")
		require.Equal(t, c.GetPassword(), row.password)
	}
	resolve := func(c **rolesetv1.ResolveConnectionResponse, err *error) func() {
		return func() { *c, *err = f.resolve(res, f.viewerRun(viewer), "datatable://main?as=viewer") }
	}
	sweep := func() {
		_, err := sw.eng.Sweep(ctx)
		require.NoError(t, err)
	}

	for _, step := range []string{engine.StepEnsureRead, engine.StepEnsureTouched} {
		t.Run("resolve paused at "+step+", sweep runs", func(t *testing.T) {
			stale(t)
			var c *rolesetv1.ResolveConnectionResponse
			var err error
			require.True(t, interleave(t, &rp, step, resolve(&c, &err), sweep), "step not reached")
			check(t, c, err)
		})
	}
	t.Run("resolve paused under the login's lock, sweep runs", func(t *testing.T) {
		// No row: the resolve makes the login; the sweep meanwhile finds nothing to drop.
		f.makeStale(t, f.resolveSet(t, f.r, viewer).GetUser())
		sweep()
		res.eng.DropCaches()
		var c *rolesetv1.ResolveConnectionResponse
		var err error
		require.True(t, interleave(t, &rp, engine.StepEnsureLocked, resolve(&c, &err), sweep), "step not reached")
		check(t, c, err)
	})
	for _, step := range []string{engine.StepSweepListed, engine.StepSweepLocked, engine.StepRetireMoved} {
		t.Run("sweep paused at "+step+", resolve runs", func(t *testing.T) {
			stale(t)
			var c *rolesetv1.ResolveConnectionResponse
			var err error
			require.True(t, interleave(t, &sp, step, sweep, resolve(&c, &err)), "step not reached")
			check(t, c, err)
		})
	}
}
