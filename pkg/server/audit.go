package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/cli"
)

// AuditConfig is the audit trail's configuration, the same flags in every service
// (docs/audit.md).
type AuditConfig struct {
	// Key is the HMAC key secrets are recorded under (at least 32 bytes); empty: secrets are
	// recorded as "redacted" and HashAuditValue is refused.
	Key Secret
	// Window is the repeat window (audit.Config.Window).
	Window time.Duration
	// FailOpen lists the classes answered even when their event cannot be written.
	FailOpen string
	// Retention: events older than this are removed by the retention loop (0: kept).
	Retention time.Duration
	// Replica names this process in its events (default: the host name).
	Replica string
}

// DefaultAuditFailOpen are the classes that fail open unless configured otherwise: the ones
// that are neither a credential, a grant of builder rights, nor a change (docs/audit.md).
const DefaultAuditFailOpen = "operator,seats,proxy"

// DefaultAudit is the audit configuration of a service given no audit flag.
func DefaultAudit() AuditConfig {
	host, _ := os.Hostname()
	return AuditConfig{Window: time.Second, FailOpen: DefaultAuditFailOpen, Retention: 90 * 24 * time.Hour, Replica: host}
}

// RegisterAuditFlags defines the audit flags on fs.
func (a *AuditConfig) RegisterAuditFlags(fs *flag.FlagSet) {
	d := DefaultAudit()
	SecretVar(fs, &a.Key, "audit-key", "MILLWRIGHT_AUDIT_KEY", "", "HMAC key (32+ bytes) under which the audit trail records secrets")
	DurationVar(fs, &a.Window, "audit-window", "MILLWRIGHT_AUDIT_WINDOW", d.Window, "identical decisions within this window are recorded as one event with a count (negative: each its own)")
	StringVar(fs, &a.FailOpen, "audit-fail-open", "MILLWRIGHT_AUDIT_FAIL_OPEN", d.FailOpen, "classes answered even when the audit trail cannot be written (comma-separated; the others fail closed)")
	DurationVar(fs, &a.Retention, "audit-retention", "MILLWRIGHT_AUDIT_RETENTION", d.Retention, "audit events older than this are removed (0: kept)")
	StringVar(fs, &a.Replica, "replica", "MILLWRIGHT_REPLICA", d.Replica, "this replica's name in audit events")
}

// NewRecorder returns the recorder of service name's trail in pool's database.
func (a AuditConfig) NewRecorder(name string, pool *pgxpool.Pool, logger *slog.Logger) (*audit.Recorder, error) {
	var h *audit.Hasher
	if k := a.Key.Reveal(); k != "" {
		var err error
		if h, err = audit.NewHasher([]byte(k)); err != nil {
			return nil, err
		}
	} else if logger != nil {
		logger.Warn("no --audit-key: the audit trail records secrets as \"redacted\" and cannot check a known value")
	}
	open := map[audit.Class]bool{}
	for c := range strings.SplitSeq(a.FailOpen, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		class, ok := audit.ClassOf(c)
		if !ok {
			return nil, fmt.Errorf("--audit-fail-open: unknown class %q (classes: %v)", c, audit.Classes)
		}
		open[class] = true
	}
	return audit.NewRecorder(audit.Config{Store: audit.NewStore(pool), Hasher: h, Service: name, Replica: a.Replica,
		Window: a.Window, FailOpen: open, Logger: logger}), nil
}

// auditRetention removes expired events every retentionEvery.
func auditRetention(rec *audit.Recorder, keep time.Duration, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(retentionEvery)
		defer t.Stop()
		for {
			for {
				n, err := rec.Store().Prune(ctx, time.Now().Add(-keep), 10_000)
				if err != nil {
					if ctx.Err() == nil {
						logger.Warn("audit retention", "err", err)
					}
					break
				}
				if n < 10_000 {
					break
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// retentionEvery is how often the retention loop runs.
const retentionEvery = time.Minute

// AuditCommand is `<service> audit verify|export`: the trail read straight from the
// service's database (--database-url), for an auditor or a shipping job that has the database
// but not the superadmin token. verify exits 1 when the chain is broken; export writes every
// event after --after-seq as JSON lines (the REST form of AuditEvent) to stdout.
func AuditCommand(ctx context.Context, name string, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "verify" && args[0] != "export") {
		return cli.Usagef("usage: %s audit verify|export [--database-url URL] [--after-seq N]", name)
	}
	var cfg Config
	var after int
	fs := flag.NewFlagSet("audit "+args[0], flag.ContinueOnError)
	cfg.RegisterFlags(fs, Config{Name: name})
	IntVar(fs, &after, "after-seq", "", 0, "export: only events after this seq")
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return cli.Usagef("--database-url is required")
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL.Reveal())
	if err != nil {
		return fmt.Errorf("%s audit: %w", name, err)
	}
	defer pool.Close()
	st := audit.NewStore(pool)
	if args[0] == "verify" {
		v, err := st.Verify(ctx)
		if err != nil {
			return fmt.Errorf("%s audit verify: %w", name, err)
		}
		if !v.OK {
			return fmt.Errorf("%s audit verify: event %d: %s (%d events before it verified)", name, v.FirstBadSeq, v.Problem, v.Checked)
		}
		fmt.Fprintf(stdout, "%s audit verify: ok, %d events\n", name, v.Checked)
		return nil
	}
	for {
		events, err := st.List(ctx, audit.Filter{AfterSeq: int64(after), Limit: 1000})
		if err != nil {
			return fmt.Errorf("%s audit export: %w", name, err)
		}
		for _, e := range events {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(audit.ToProto(e))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
				return err
			}
			after = int(e.Seq)
		}
		if len(events) < 1000 {
			return nil
		}
	}
}
