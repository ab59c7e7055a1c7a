// Package servicetest holds what the tests of more than one service need to run the real thing
// beside them: the real policy binary (its packages are internal to its module, so other
// services' tests run it as a process, as in production), free loopback addresses, bearer
// metadata, a sample read from /metrics and job ids.
package servicetest
