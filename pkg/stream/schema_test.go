package stream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

type emitted struct {
	Op, Workspace, Key string
	Payload            map[string]any
}

func TestTriggerEmits(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))

	// The cases run in order against one database: each starts from the previous one's state.
	cases := []struct {
		name string
		sql  []string // one transaction
		want []emitted
	}{
		{
			name: "insert copies only listed columns",
			sql:  []string{`INSERT INTO member VALUES ('w1', 'alice', 'admin', false, 's3cret')`},
			want: []emitted{{"insert", "w1", "alice", map[string]any{"role": "admin", "disabled": false}}},
		},
		{
			name: "update",
			sql:  []string{`UPDATE member SET role = 'viewer' WHERE username = 'alice'`},
			want: []emitted{{"update", "w1", "alice", map[string]any{"role": "viewer", "disabled": false}}},
		},
		{
			name: "update of an unlisted column still emits, without it",
			sql:  []string{`UPDATE member SET secret = 'other' WHERE username = 'alice'`},
			want: []emitted{{"update", "w1", "alice", map[string]any{"role": "viewer", "disabled": false}}},
		},
		{
			name: "update that changes nothing emits nothing",
			sql:  []string{`UPDATE member SET role = role`},
			want: []emitted{},
		},
		{
			name: "key change retracts the old key and announces the new",
			sql:  []string{`UPDATE member SET username = 'alicia', disabled = true WHERE username = 'alice'`},
			want: []emitted{
				{"delete", "w1", "alice", map[string]any{"role": "viewer", "disabled": false}},
				{"insert", "w1", "alicia", map[string]any{"role": "viewer", "disabled": true}},
			},
		},
		{
			name: "delete carries OLD's key and columns",
			sql:  []string{`DELETE FROM member WHERE username = 'alicia'`},
			want: []emitted{{"delete", "w1", "alicia", map[string]any{"role": "viewer", "disabled": true}}},
		},
		{
			name: "no workspace column, non-text key",
			sql:  []string{`INSERT INTO item (name) VALUES ('x')`},
			want: []emitted{{"insert", "", "1", map[string]any{"name": "x"}}},
		},
		{
			name: "one transaction keeps statement order",
			sql: []string{
				`INSERT INTO member VALUES ('w2', 'bob', 'dev', false, NULL)`,
				`UPDATE member SET role = 'admin' WHERE username = 'bob'`,
				`DELETE FROM member WHERE username = 'bob'`,
			},
			want: []emitted{
				{"insert", "w2", "bob", map[string]any{"role": "dev", "disabled": false}},
				{"update", "w2", "bob", map[string]any{"role": "admin", "disabled": false}},
				{"delete", "w2", "bob", map[string]any{"role": "admin", "disabled": false}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, err := stream.Head(ctx, pool)
			require.NoError(t, err)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			for _, q := range tc.sql {
				_, err := tx.Exec(ctx, q)
				require.NoError(t, err, q)
			}
			// Nothing is in the outbox before commit: events are parked until then.
			var n int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM stream_outbox WHERE id > $1`, before).Scan(&n))
			require.Zero(t, n)
			require.NoError(t, tx.Commit(ctx))

			rows, err := pool.Query(ctx, `SELECT op, workspace, key, payload FROM stream_outbox WHERE id > $1 ORDER BY id`, before)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (emitted, error) {
				var e emitted
				var p []byte
				if err := r.Scan(&e.Op, &e.Workspace, &e.Key, &p); err != nil {
					return e, err
				}
				return e, json.Unmarshal(p, &e.Payload)
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stream_pending`).Scan(&pending))
	require.Zero(t, pending, "stream_pending must be empty after commit")
}

func TestTriggerMisconfigured(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	cases := []struct {
		name, trigger, wantErr string
	}{
		{"unknown payload column", `AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION stream_emit('t', '', 'k', 'nope')`, "nope is not a column"},
		{"unknown key column", `AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION stream_emit('t', '', 'kk')`, "kk is not a column"},
		{"unknown workspace column", `AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION stream_emit('t', 'ws', 'k')`, "ws is not a column"},
		{"too few arguments", `AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION stream_emit('t', '')`, "arguments are"},
		{"before trigger", `BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION stream_emit('t', '', 'k')`, "AFTER ... FOR EACH ROW"},
		{"statement trigger", `AFTER INSERT ON t FOR EACH STATEMENT EXECUTE FUNCTION stream_emit('t', '', 'k')`, "AFTER ... FOR EACH ROW"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS t; CREATE TABLE t (k text, v text); CREATE TRIGGER t_stream `+tc.trigger)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO t VALUES ('a', 'b')`)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestRollbackEmitsNothing(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := newDB(t)
	pool := pgtest.Pool(t, dsn)
	s := stream.New(pool, stream.Options{})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)

	// A raw listener of our own, to prove no notification is sent either.
	ln, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer ln.Close(context.Background())
	_, err = ln.Exec(ctx, "LISTEN "+stream.Channel)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO member VALUES ('w', 'ghost', 'admin', false, NULL)`)
	require.NoError(t, err)
	_, err = stream.Append(ctx, tx, stream.Event{Kind: "run", Key: "r1", Op: "update"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	// A marker committed afterwards must be the first thing anyone sees.
	insertItem(t, pool, "marker")
	head := waitHead(t, s, pool)
	evs := got.events()
	require.Len(t, evs, 1)
	require.Equal(t, "item", evs[0].Kind)
	require.Equal(t, head, evs[0].ID)
	n, err := ln.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, head, mustParse(t, n.Payload), "the first notification must be the marker's")
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stream_outbox`).Scan(&rows))
	require.Equal(t, 1, rows)
}

func TestAppend(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	id, err := stream.Append(ctx, tx, stream.Event{Kind: "run", Workspace: "w", Key: "r1", Op: "update", Payload: json.RawMessage(`{"ended":true}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, s.WaitFor(wctx, id))
	evs := got.events()
	require.Len(t, evs, 1)
	e := evs[0]
	require.Equal(t, id, e.ID)
	require.Equal(t, []string{"run", "w", "r1", "update"}, []string{e.Kind, e.Workspace, e.Key, e.Op})
	require.JSONEq(t, `{"ended":true}`, string(e.Payload))
	require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)

	for _, tc := range []struct {
		name string
		e    stream.Event
	}{
		{"no kind", stream.Event{Op: "update"}},
		{"no op", stream.Event{Kind: "run"}},
		{"reserved op", stream.Event{Kind: "run", Op: stream.OpResync}},
		{"bad payload", stream.Event{Kind: "run", Op: "update", Payload: json.RawMessage(`{`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stream.Append(ctx, pool, tc.e)
			require.Error(t, err)
		})
	}
}

// The ordering lock is taken at COMMIT only: an open transaction that emitted an event blocks
// no other writer, and two writers touching a common row in opposite orders do not deadlock.
func TestOrderingLockIsHeldOnlyAtCommit(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, newDB(t))
	_, err := pool.Exec(ctx, `INSERT INTO consumer VALUES ('row', 0)`)
	require.NoError(t, err)

	t.Run("open emitting transaction does not block others", func(t *testing.T) {
		open, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer open.Rollback(ctx)
		_, err = open.Exec(ctx, `INSERT INTO member VALUES ('w', 'slow', 'admin', false, NULL)`)
		require.NoError(t, err)

		start := time.Now()
		qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
		defer qcancel()
		_, err = pool.Exec(qctx, `INSERT INTO member VALUES ('w', 'fast', 'admin', false, NULL)`)
		require.NoError(t, err, "a second writer must not wait for the open transaction")
		require.Less(t, time.Since(start), time.Second)
		require.NoError(t, open.Commit(ctx))
	})

	t.Run("opposite lock order does not deadlock", func(t *testing.T) {
		a, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer a.Rollback(ctx)
		b, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer b.Rollback(ctx)

		_, err = a.Exec(ctx, `UPDATE consumer SET last_id = 1 WHERE name = 'row'`)
		require.NoError(t, err)
		_, err = b.Exec(ctx, `INSERT INTO member VALUES ('w', 'b', 'dev', false, NULL)`)
		require.NoError(t, err)
		bDone := make(chan error, 1)
		go func() {
			_, err := b.Exec(ctx, `UPDATE consumer SET last_id = 2 WHERE name = 'row'`) // waits for a
			if err == nil {
				err = b.Commit(ctx)
			}
			bDone <- err
		}()
		time.Sleep(100 * time.Millisecond) // let b block on the row
		_, err = a.Exec(ctx, `INSERT INTO member VALUES ('w', 'a', 'dev', false, NULL)`)
		require.NoError(t, err)
		require.NoError(t, a.Commit(ctx))
		require.NoError(t, <-bDone)
	})
}
