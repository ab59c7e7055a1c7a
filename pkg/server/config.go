package server

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/millwright/millwright/pkg/auth"
)

// Config is what every service reads from flags and the environment.
type Config struct {
	Name            string // service name, for logs and traces; set by the service, not a flag
	GRPCAddr        string
	MetricsAddr     string // "" disables the HTTP metrics server
	DatabaseURL     DSN
	LogLevel        string // debug, info, warn, error
	LogFormat       string // json or text
	ShutdownTimeout time.Duration
	AdminToken      Secret
	ServiceToken    Secret
	Limits          Limits
	Audit           AuditConfig
}

// Limits bound what one gRPC client can hold of a service: connections that do not finish
// their handshake, or sit idle, are closed, and one connection multiplexes a bounded number of
// calls. A zero field takes its default (DefaultLimits).
type Limits struct {
	// MaxConcurrentStreams bounds the calls in flight on one connection; further calls wait
	// for one to end (gRPC flow control), they are not refused.
	MaxConcurrentStreams int
	// ConnectionTimeout: a new connection must complete its HTTP/2 handshake within it.
	ConnectionTimeout time.Duration
	// IdleTimeout: a connection with no call in flight for this long is sent GOAWAY (a
	// client reconnects on its next call).
	IdleTimeout time.Duration
}

// DefaultLimits are the services' defaults (docs/operations.md, "Connection limits").
func DefaultLimits() Limits {
	return Limits{MaxConcurrentStreams: 1000, ConnectionTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConcurrentStreams <= 0 {
		l.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	if l.ConnectionTimeout <= 0 {
		l.ConnectionTimeout = d.ConnectionTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// RegisterFlags defines the common flags on fs, each with an environment fallback; after
// parsing, a flag given on the command line beats its environment variable, which beats the
// default. Parse with cli.ParseFlags so that a malformed environment value is an error.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaults Config) {
	c.Name = defaults.Name
	if defaults.LogLevel == "" {
		defaults.LogLevel = "info"
	}
	if defaults.LogFormat == "" {
		defaults.LogFormat = "json"
	}
	if defaults.ShutdownTimeout == 0 {
		defaults.ShutdownTimeout = 15 * time.Second
	}
	StringVar(fs, &c.GRPCAddr, "grpc-addr", "MILLWRIGHT_GRPC_ADDR", defaults.GRPCAddr, "gRPC listen address")
	StringVar(fs, &c.MetricsAddr, "metrics-addr", "MILLWRIGHT_METRICS_ADDR", defaults.MetricsAddr, "HTTP address for /metrics and /healthz (empty: off)")
	DSNVar(fs, &c.DatabaseURL, "database-url", "DATABASE_URL", defaults.DatabaseURL, "PostgreSQL connection string")
	StringVar(fs, &c.LogLevel, "log-level", "MILLWRIGHT_LOG_LEVEL", defaults.LogLevel, "debug, info, warn or error")
	StringVar(fs, &c.LogFormat, "log-format", "MILLWRIGHT_LOG_FORMAT", defaults.LogFormat, "json or text")
	DurationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", "MILLWRIGHT_SHUTDOWN_TIMEOUT", defaults.ShutdownTimeout, "how long in-flight calls may run after SIGTERM")
	dl := DefaultLimits()
	IntVar(fs, &c.Limits.MaxConcurrentStreams, "grpc-max-concurrent-streams", "MILLWRIGHT_GRPC_MAX_CONCURRENT_STREAMS", dl.MaxConcurrentStreams, "calls in flight on one client connection; more wait")
	DurationVar(fs, &c.Limits.ConnectionTimeout, "grpc-connection-timeout", "MILLWRIGHT_GRPC_CONNECTION_TIMEOUT", dl.ConnectionTimeout, "time allowed for a new connection's handshake")
	DurationVar(fs, &c.Limits.IdleTimeout, "grpc-idle-timeout", "MILLWRIGHT_GRPC_IDLE_TIMEOUT", dl.IdleTimeout, "a connection with no call in flight is closed after this")
	SecretVar(fs, &c.AdminToken, "admin-token", "MILLWRIGHT_ADMIN_TOKEN", defaults.AdminToken, "bootstrap superadmin bearer token")
	SecretVar(fs, &c.ServiceToken, "service-token", "MILLWRIGHT_SERVICE_TOKEN", defaults.ServiceToken, "service-to-service bearer token")
	c.Audit.RegisterAuditFlags(fs)
}

// Secret is a string that must not be printed: String, GoString, LogValue and JSON all show
// "[redacted]" (or "" when unset, so "is it configured" stays visible). Reveal gets the value.
type Secret string

const redacted = "[redacted]"

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON keeps a Secret out of JSON dumps of a config.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Reveal returns the secret itself, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// DSN is a database connection string. It prints with its password redacted, because the
// rest of it (host, database, user) is exactly what one needs to read in a log.
type DSN string

func (d DSN) String() string               { return RedactDSN(string(d)) }
func (d DSN) GoString() string             { return strconv.Quote(d.String()) }
func (d DSN) LogValue() slog.Value         { return slog.StringValue(d.String()) }
func (d DSN) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }
func (d DSN) Reveal() string               { return string(d) }

var kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// RedactDSN replaces the password of a URL ("postgres://u:pw@h/db", "?password=pw") or
// key=value ("host=h password=pw") connection string with "xxxxx". A URL it cannot parse is
// redacted whole: better an unreadable log line than a leaked password.
func RedactDSN(s string) string {
	if !strings.Contains(s, "://") {
		return kvPassword.ReplaceAllString(s, "${1}xxxxx")
	}
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	out := u.String()
	return kvPassword.ReplaceAllString(out, "${1}xxxxx")
}

// value is a flag.Value with an environment fallback. It remembers where its value came from
// (for LogConfig), an unparsable environment value, and a value the command line may not
// carry (both for cli.ParseFlags).
type value[T any] struct {
	p       *T
	parse   func(string) (T, error)
	format  func(T) string
	isBool  bool
	secret  bool
	env     string
	fromEnv bool
	envErr  error
	// onFlag, when set, refuses some values on the command line (a secret: every local user
	// reads a process's arguments in ps and /proc/<pid>/cmdline). The refusal is reported by
	// cli.ParseFlags, not by Set: the flag package would print the value in its error.
	onFlag  func(string) error
	flagErr error
	// fileEnv: the value may also come from the file named by env+"_FILE" (a mounted
	// Kubernetes or Docker secret, a file of mode 600).
	fileEnv bool
}

func (v *value[T]) String() string {
	if v == nil || v.p == nil { // flag.isZeroValue calls String on a zero value
		return ""
	}
	return v.format(*v.p)
}

func (v *value[T]) Set(s string) error {
	if v.onFlag != nil {
		if err := v.onFlag(s); err != nil {
			v.flagErr = err
			return nil // the value is dropped, and ParseFlags reports FlagError
		}
	}
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *value[T]) Get() any         { return *v.p }
func (v *value[T]) IsBoolFlag() bool { return v.isBool }
func (v *value[T]) EnvError() error  { return v.envErr }
func (v *value[T]) FlagError() error { return v.flagErr }
func (v *value[T]) isSecret() bool   { return v.secret }
func (v *value[T]) isFromEnv() bool  { return v.fromEnv }

func define[T any](fs *flag.FlagSet, v *value[T], name string, def T, usage string) {
	*v.p = def
	if v.env != "" && v.fileEnv {
		usage += " (env " + v.env + ") (or " + v.env + "_FILE: a file holding it)"
		if path, ok := os.LookupEnv(v.env + "_FILE"); ok && path != "" {
			b, err := os.ReadFile(path)
			switch {
			case os.Getenv(v.env) != "":
				v.envErr = fmt.Errorf("environment: set %s or %s_FILE, not both", v.env, v.env)
			case err != nil:
				v.envErr = fmt.Errorf("environment %s_FILE: %w", v.env, err)
			default:
				if x, err := v.parse(strings.TrimRight(string(b), "\r\n")); err != nil {
					v.envErr = fmt.Errorf("environment %s_FILE: %w", v.env, err)
				} else {
					*v.p, v.fromEnv = x, true
				}
			}
		}
	} else if v.env != "" {
		usage += " (env " + v.env + ")"
	}
	if v.env != "" && v.envErr == nil && !v.fromEnv {
		if s, ok := os.LookupEnv(v.env); ok && s != "" {
			if x, err := v.parse(s); err != nil {
				v.envErr = fmt.Errorf("environment %s: %w", v.env, err)
			} else {
				*v.p, v.fromEnv = x, true
			}
		}
	}
	fs.Var(v, name, usage)
}

func parseString(s string) (string, error) { return s, nil }
func ident[T any](x T) T                   { return x }

// StringVar defines a string flag with an environment fallback (env "" for none).
func StringVar(fs *flag.FlagSet, p *string, name, env, def, usage string) {
	define(fs, &value[string]{p: p, parse: parseString, format: ident[string], env: env}, name, def, usage)
}

// SecretVar defines a Secret: read from the environment variable env or from the file named
// by env+"_FILE", never from the command line (cli.ParseFlags refuses the flag, naming both),
// since every local user can read a process's arguments. The flag stays defined so that -h
// lists the setting and a mistaken use is refused rather than unknown. Its value never shows
// in usage or LogConfig.
func SecretVar(fs *flag.FlagSet, p *Secret, name, env string, def Secret, usage string) {
	define(fs, &value[Secret]{p: p, parse: func(s string) (Secret, error) { return Secret(s), nil },
		format: Secret.String, secret: true, env: env, fileEnv: env != "",
		onFlag: func(string) error {
			return fmt.Errorf("--%s: a secret on the command line is readable by every local user (ps, /proc/<pid>/cmdline); set %s or %s_FILE instead", name, env, env)
		}}, name, def, usage)
}

// DSNVar defines a DSN flag (env env, or a file named by env+"_FILE"). A connection string
// that carries a password is refused on the command line, for the reason SecretVar gives; one
// without (the password from PGPASSWORD or a passfile) is fine there. Its password never
// shows in usage or LogConfig.
func DSNVar(fs *flag.FlagSet, p *DSN, name, env string, def DSN, usage string) {
	define(fs, &value[DSN]{p: p, parse: func(s string) (DSN, error) { return DSN(s), nil },
		format: DSN.String, env: env, fileEnv: env != "",
		onFlag: func(s string) error {
			if !HasPassword(s) {
				return nil
			}
			return fmt.Errorf("--%s carries a password, and the command line is readable by every local user (ps, /proc/<pid>/cmdline); set %s or %s_FILE instead, or leave the password out and use PGPASSWORD or a passfile", name, env, env)
		}}, name, def, usage)
}

// HasPassword reports whether a connection string (URL or key=value) carries a password. A
// URL it cannot parse counts as carrying one: refusing it costs a clear error, letting a
// password through costs the password.
func HasPassword(s string) bool {
	if kvPassword.MatchString(s) {
		return true
	}
	if !strings.Contains(s, "://") {
		return false
	}
	u, err := url.Parse(s)
	if err != nil {
		return true
	}
	_, has := u.User.Password()
	return has || u.Query().Has("password")
}

// DurationVar defines a time.Duration flag ("30s") with an environment fallback.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name, env string, def time.Duration, usage string) {
	define(fs, &value[time.Duration]{p: p, parse: time.ParseDuration, format: time.Duration.String, env: env}, name, def, usage)
}

// IntVar defines an int flag with an environment fallback.
func IntVar(fs *flag.FlagSet, p *int, name, env string, def int, usage string) {
	define(fs, &value[int]{p: p, parse: strconv.Atoi, format: strconv.Itoa, env: env}, name, def, usage)
}

// BoolVar defines a bool flag ("--x" alone means true) with an environment fallback.
func BoolVar(fs *flag.FlagSet, p *bool, name, env string, def bool, usage string) {
	define(fs, &value[bool]{p: p, parse: strconv.ParseBool, format: strconv.FormatBool, isBool: true, env: env}, name, def, usage)
}

type described interface {
	isSecret() bool
	isFromEnv() bool
}

var secretName = regexp.MustCompile(`(?i)token|password|passwd|secret|key|credential`)

// LogConfig logs every flag of fs in one "config" line, with where each value came from.
// Secrets show as "[redacted]" and DSN passwords as "xxxxx"; flags defined with the plain
// flag package get the same treatment by name (token, password, secret, key) and by
// content (anything that looks like a URL with a password).
func LogConfig(logger *slog.Logger, fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var values, sources []any
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		d, ours := f.Value.(described)
		switch {
		case ours && d.isSecret(), !ours && secretName.MatchString(f.Name) && v != "":
			v = Secret(v).String()
		case !ours:
			v = RedactDSN(v)
		}
		src := "default"
		switch {
		case set[f.Name]:
			src = "flag"
		case ours && d.isFromEnv():
			src = "env"
		}
		values = append(values, slog.String(f.Name, v))
		sources = append(sources, slog.String(f.Name, src))
	})
	logger.Info("config", slog.Group("flags", values...), slog.Group("source", sources...))
}

// NewLogger returns the JSON (or text) slog logger services log with.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "", "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}

// StaticTokens is the authenticator of the two config tokens, the first link of every
// service's chain (compared locally, so they keep working while policy is away).
func (c Config) StaticTokens() auth.Static {
	return auth.Static{AdminToken: c.AdminToken.Reveal(), ServiceToken: c.ServiceToken.Reveal()}
}
