package app

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/services/roleset/internal/store"
)

func newStore(p *pgxpool.Pool) *store.Store { return store.New(p) }
