package app

// Failpoints names every failpoint a roleset process can hit (pkg/failpoint): its own steps
// and those of pkg/stream it runs. The chaos test picks from it; TestFailpoints keeps it equal
// to the failpoint.Hit sites in the source.
var Failpoints = []string{
	"roleset/ensure/after-cluster-commit",
	"roleset/ensure/committed",
	"roleset/ensure/locked",
	"roleset/ensure/touched",
	"roleset/rejudge/before-close",
	"roleset/retire/dropped",
	"roleset/retire/journaled",
	"roleset/retire/nologin",
	"roleset/retire/terminated",
	"roleset/role-create/cluster-created",
	"roleset/role-create/ready",
	"roleset/role-create/row-creating",
	"roleset/role-delete/dropped",
	"roleset/role-delete/marked",
	"roleset/role-delete/retired",
	"roleset/role-disable/catalog",
	"roleset/role-disable/nologin",
	"roleset/role-enable/cluster-login",
	"roleset/sweep/journal-listed",
	"roleset/sweep/locked",
	"roleset/takeback/after-cluster-commit",
	"roleset/ticket/before-insert",
	"roleset/ticket/before-revoke",
	"roleset/ticket/inserted",
	"roleset/ticket/revoked",
	"stream/follow/applied",
	"stream/follow/received",
	"stream/listen/read",
}
