package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/stream"
)

// seatLock serializes every change that may add seats (builder turned on, a member written
// that may add seats) across replicas, so that two of them are priced one after the other, the
// second seeing the first: a check-then-commit race would let both pass the seat cap together.
const seatLock int64 = 0x6d77_6275_696c_6472 // "mwbuildr", the builder-on lock it generalizes

// The transaction marks the guard triggers check (migrations 00003 and 00004).
const (
	builderGuard = "millwright.builder_enable_checked" // value: the workspace
	memberGuard  = "millwright.member_seat_checked"    // value: "<workspace>/<username>"
)

// checkSeats is the one priced path of a change that may add seats. With a check (billing's
// CheckSeatCap through settings.SeatChecker) it takes seatLock, reads the stream head after
// the lock (read committed: every seat change committed before the lock was granted is at or
// below it, so billing, asked to be at least that fresh, prices this change after them) and
// calls check; an error aborts the transaction. It then marks the transaction for the guard
// trigger, whose key names the row about to be written. A nil check means no seat checker is
// configured (development only): there is no cap to price, and the write is marked all the
// same.
//
// It must run before the transaction's first write: a write appends to the stream, whose lock
// is held until commit, and a transaction holding it while waiting for seatLock would deadlock
// with the holder of seatLock appending its own event.
func checkSeats(ctx context.Context, tx pgx.Tx, check func(ctx context.Context, head int64) error, guard, key string) error {
	if check != nil {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, seatLock); err != nil {
			return err
		}
		// Latest, not Head: billing must have applied every event committed so far (the last
		// seat writer's included, which released seatLock at its commit); Head may stop below
		// it while unrelated transactions are still committing.
		head, err := stream.Latest(ctx, tx)
		if err != nil {
			return err
		}
		if err := check(ctx, head); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `SELECT set_config($1, $2, true)`, guard, key)
	return err
}
