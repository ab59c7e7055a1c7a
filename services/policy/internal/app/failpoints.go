package app

// Failpoints names every failpoint a policy process can hit (pkg/failpoint): its own steps
// and its stream listener's (policy follows no other service's stream). TestFailpoints keeps it equal to the failpoint.Hit sites in
// the source.
var Failpoints = []string{
	"policy/settings/before-seat-check",
	"policy/settings/committed",
	"policy/settings/seat-checked",
	"stream/listen/read",
}
