// Package authn authenticates the bearer tokens policy issues (user "mwu_" and job "mwj_"
// tokens) inside the policy process: a digest lookup through a per-process cache whose entries
// the stream subscriber drops on token, member and run events, so a revoke, a removed or
// disabled member or a finished run reaches every replica within the stream's latency.
package authn
