// Package retention is policy's maintenance loop: on every replica, at start and then every
// interval, it keeps the weekly partitions of runs and job tokens created ahead, drops the ones
// older than the run retention and deletes user tokens dead for longer than the token
// retention (store.Maintain, which is safe on every replica at once). The clock is injected so
// that tests move time instead of sleeping. What still needs a run or a token, and for how long,
// is in docs/policy.md ("Retention").
package retention
