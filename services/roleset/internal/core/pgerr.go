package core

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

func containsCode(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}
