// Package migrations embeds the roleset service's SQL migrations (goose format, numbered from
// 00002: version 1 is the stream schema that pkg/migrate applies to every service).
package migrations

import "embed"

// FS holds the *.sql files, applied in order by migrate.Up.
//
//go:embed *.sql
var FS embed.FS
