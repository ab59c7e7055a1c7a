// Package seats holds billing's pure rules: what a member's role and a workspace's builder flag
// mean for seats, seat weights in integer milli-seats (so an operator's half seat never drifts),
// whether a priced change fits under the licensed cap, and how policy's stream events translate
// into changes of the projection. It imports neither gRPC nor pgx; the counting itself is the one
// SQL definition in the store.
package seats
