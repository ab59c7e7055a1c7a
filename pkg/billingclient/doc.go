// Package billingclient is how other services ask billing to price a change before they
// commit it. Checker implements policy's SeatChecker hook: it calls billing's
// CheckSeatCapForOperatorBuilder (builder turned on) or CheckSeatCap (a member write that may
// add seats) with policy's stream position, and turns "not allowed" into the one refusal
// policy returns to its caller for both:
// FailedPrecondition, reason SEAT_CAP_EXCEEDED, metadata before / after / cap (decimal seats).
// A billing that cannot answer (down, projection behind) is an error too: the change is
// refused rather than let through unpriced.
package billingclient
