// Package pgproxy is the PostgreSQL wire-protocol front end of roleset's credential proxy: it
// authenticates a client with SCRAM-SHA-256 against a verifier its caller looks up (a ticket,
// later), connects upstream as the login its caller decides with that login's real password,
// answers the client's start-up itself (so the upstream's password and cancel key never reach
// the client), and then relays bytes both ways without parsing them. The upstream start-up is
// its own too (DialConfig), not pgconn's: as a SCRAM client it keeps the PBKDF2 result per
// (password, salt, iteration count), which pgconn recomputes at every connect.
//
// It knows nothing of tickets, decisions or stores: an Authorizer gives the verifier and the
// upstream Target of a user name, a CancelKeys maps the proxy's own cancel keys to the
// upstream's (so any replica can forward a cancel), and CloseSessions ends the sessions bound to
// whatever a revocation names, upstream backend included. OnSession tells the caller each
// session's start (granted, or refused with its SQLSTATE) and end, for its audit trail.
// Bounds: a start-up packet of at most 10 KiB, start-up (TLS, SCRAM, upstream connect) within
// a deadline, at most MaxSessions connections.
package pgproxy
