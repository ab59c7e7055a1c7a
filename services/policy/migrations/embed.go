// Package migrations embeds the policy service's SQL migrations (numbered from 00002; version 1
// is the stream schema that pkg/migrate applies).
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
