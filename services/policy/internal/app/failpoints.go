package app

// Failpoints names every failpoint a policy process can hit (pkg/failpoint): its own steps
// and those of pkg/stream it runs. TestFailpoints keeps it equal to the failpoint.Hit sites in
// the source.
var Failpoints = []string{
	"policy/settings/before-seat-check",
	"policy/settings/committed",
	"policy/settings/seat-checked",
	"stream/follow/applied",
	"stream/follow/received",
	"stream/listen/read",
}
