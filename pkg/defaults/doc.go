// Package defaults is the one rule for a numeric setting left unset: every limit, interval and
// TTL in the services' options treats zero or a negative value as "use the default", so that a
// zero Options (or Limits, Deps...) is a working configuration and a negative one can never
// mean "no bound".
package defaults
