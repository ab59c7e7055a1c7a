// Package auth carries the caller's Identity through a request's context and defines how a
// bearer token becomes one: the Authenticator interface, Static for the two tokens that come
// from config (the bootstrap superadmin token and the service-to-service token), Chain to try
// several authenticators in order, and PerRPC to send a token from a client.
//
// Authenticators distinguish "this token is not mine" (ErrUnknownToken: let the next one try)
// from "this token is mine and refused" (any other error: stop). Without that difference a
// Chain would either have to stop at the first authenticator or let a revoked user token be
// retried against every other source.
package auth
