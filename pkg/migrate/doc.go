// Package migrate applies a service's embedded SQL migrations with goose. Version 1 of every
// service is the invalidation stream's schema (pkg/stream), so no service can forget it and the
// trigger function exists before any migration attaches a trigger; a service's own files are
// numbered from 00002.
package migrate
