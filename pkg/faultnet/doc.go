// Package faultnet is a fault-injecting TCP proxy for tests: it listens on loopback, forwards
// every connection to one target address, and can at runtime add latency per direction, stall
// (stop forwarding bytes but keep the connections: what lost packets look like to TCP, whose
// retransmissions deliver everything once the path heals), reset every open connection (RST,
// not FIN), partition (stall the open connections and black-hole new ones: accepted, never
// connected onward until the heal), and refuse (reset the open connections and every new one
// until the heal). Heal undoes all of it.
//
// It exists so that tests can put a slow or broken network between a service and a dependency
// it does not own (roleset and a target cluster: docs/reliability.md) and assert what the
// service answers and that it recovers, without root, iptables or a network namespace. It is a
// normal package, not a _test file, so that every service's tests can use it.
package faultnet
