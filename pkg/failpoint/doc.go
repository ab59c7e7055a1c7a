// Package failpoint is the fault build's named crash points, in the style of etcd's gofail:
// code calls Hit("roleset/ensure/after-cluster-commit") at a step whose crash window matters,
// and the chaos tests (docs/reliability.md, "Process kills at named failpoints") run a binary
// built with the build tag `failpoints`, armed with MILLWRIGHT_FAILPOINT=name (or name:n, the
// n-th hit), so that the process SIGKILLs itself exactly there: no deferred code, no flush,
// no graceful close, as a crash or an OOM kill would leave it.
//
// Without the tag Hit is an empty function the compiler inlines away, and the environment is
// never read: a production binary cannot be armed. Every name a service hits is listed in its
// Names variable (a test greps the source and checks the list is exact), so a harness can
// pick one at random without running the code first.
package failpoint
