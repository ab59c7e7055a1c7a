package migrate

import (
	"context"
	"io/fs"
)

// SchemaCheck is VersionCheck against the newest of fsys's migrations: the whole readiness rule
// (pkg/server's Options.SchemaVersion) of a service that waits for nothing but its schema.
func SchemaCheck(q Querier, fsys fs.FS) (func(context.Context) (int64, int64, error), error) {
	expected, err := Expected(fsys)
	if err != nil {
		return nil, err
	}
	return VersionCheck(q, expected), nil
}
