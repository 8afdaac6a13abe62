package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sendonce/sendonce/migrations"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// app is one run of the command: its streams, environment and global
// flags. Tests run it in-process through run.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	databaseURL string
	pooler      poolerMode
	logFormat   string
	logLevel    string

	logger *slog.Logger
}

// run executes the command line args and returns the exit status: 0 on
// success, 1 when the command failed, 2 when the command line was wrong.
// Every failure is one line on stderr, "sendonce: " and what was wrong.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr,
		logger: slog.New(slog.DiscardHandler)}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "sendonce: %s%s\n", errorLine(err, dsnSecrets(a.databaseURL)...), a.pooler.hint(err))
	}
	return exitCode(err)
}

const rootLong = `sendonce sends email through the OpenEmail API exactly once, from an outbox
table in your PostgreSQL database.

Your application enqueues an intent (the API body and an idempotency key
derived from the cause of the send) in the same transaction as its own rows;
"sendonce work" sends every committed intent, retrying with the same key so
that a retry replays rather than repeats. The other commands migrate the
database and let an operator enqueue, inspect, cancel and retry intents.

Configuration comes from flags and the environment; a flag given on the
command line wins over its variable. The OpenEmail API key is read from
OPENEMAIL_API_KEY only (flags show in ps) and is never printed or logged.

Exit status: 0 on success, 1 when the command failed, 2 when the command line
was wrong. Errors are one line on stderr, starting "sendonce: ".`

const rootExamples = `  export DATABASE_URL=postgres://app@localhost/app
  sendonce migrate
  OPENEMAIL_API_KEY=oe_live_… sendonce work --concurrency 200
  echo '{"from":"billing@example.com","to":"ada@example.com","subject":"Invoice","text":"…"}' |
    sendonce enqueue --key invoice:inv_4192
  sendonce status
  sendonce list --state failed --json
  sendonce retry invoice:inv_4192
  sendonce demo`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "sendonce",
		Short:         "Send email through the OpenEmail API exactly once, from a PostgreSQL outbox",
		Long:          rootLong,
		Example:       rootExamples,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd, a.getenv); err != nil {
				return err
			}
			logger, err := newLogger(a.logFormat, a.logLevel, a.stderr)
			if err != nil {
				return err
			}
			a.logger = logger
			warnDSNPassword(cmd, a.databaseURL, logger)
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	pf := root.PersistentFlags()
	pf.StringVar(&a.databaseURL, "database-url", "",
		"PostgreSQL connection URL, e.g. postgres://user@host/db (required except for demo)")
	bindEnv(pf, "database-url", "DATABASE_URL")
	a.pooler = poolerNone
	pf.Var(&a.pooler, "pooler",
		"the connection pooler between sendonce and the database, by its pool mode: none (a direct connection), session, "+
			"or transaction (PgBouncer's transaction mode: no prepared statements, and work polls instead of LISTENing)")
	bindEnv(pf, "pooler", "SENDONCE_POOLER")
	pf.StringVar(&a.logFormat, "log-format", "auto",
		"log format on stderr: auto (text on a terminal, JSON otherwise), text or json")
	bindEnv(pf, "log-format", "SENDONCE_LOG_FORMAT")
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bindEnv(pf, "log-level", "SENDONCE_LOG_LEVEL")

	root.AddCommand(
		a.migrateCommand(),
		a.workCommand(),
		a.enqueueCommand(),
		a.statusCommand(),
		a.showCommand(),
		a.listCommand(),
		a.cancelCommand(),
		a.retryCommand(),
		a.runsCommand(),
		a.runCommand(),
		a.scheduleCommand(),
		a.tenantsCommand(),
		a.tenantCommand(),
		a.breakersCommand(),
		a.scopeBreakerCommand(),
		a.suppressionCommand(),
		a.pruneCommand(),
		a.demoCommand(),
	)
	return root
}

// runE adapts a command's body: its errors are runtime errors (exit 1)
// unless it says otherwise with a usageError.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		var ue usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return runtimeError{err}
	}
}

// keyArg accepts exactly one argument, the intent's key.
func keyArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s needs one argument, the intent's idempotency key (got %d)", cmd.Name(), len(args))
	}
	return nil
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments (got %q)", cmd.Name(), strings.Join(args, " "))
	}
	return nil
}

const envAnnotation = "sendonce_env"

// bindEnv names the environment variable a flag falls back to, and says so
// in its help.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[envAnnotation] = []string{env}
	f.Usage += " (env " + env + ")"
}

// applyEnv sets every flag of cmd not given on the command line from its
// environment variable, when that is set and not empty.
func applyEnv(cmd *cobra.Command, getenv func(string) string) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if len(env) == 0 || f.Changed || err != nil {
			return
		}
		if v := getenv(env[0]); v != "" {
			if e := f.Value.Set(v); e != nil {
				shown := v
				if f.Name == "ui-token" || f.Name == "database-url" {
					shown = "…"
				}
				err = usagef("%s=%q: %v", env[0], shown, e)
			}
		}
	})
	return err
}

// newLogger makes the slog logger for stderr.
func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info", "":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, usagef("unknown --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "auto", "":
		if isTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("unknown --log-format %q: want auto, text or json", format)
}

// isTerminal reports whether f (a stream) is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// connectTimeout bounds connecting to the database when the URL sets no
// connect_timeout of its own.
const connectTimeout = 10 * time.Second

// connect opens a pool on --database-url and checks that the database
// answers. minConns, when positive, raises the pool's size to at least
// that unless the URL sets pool_max_conns itself.
func (a *app) connect(ctx context.Context, minConns int) (*pgxpool.Pool, error) {
	if a.databaseURL == "" {
		return nil, usagef("no database given: set --database-url or DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(a.databaseURL)
	if err != nil {
		return nil, usagef("invalid database URL: %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if err := a.pooler.configure(cfg, a.databaseURL); err != nil {
		return nil, err
	}
	if minConns > 0 && !strings.Contains(a.databaseURL, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, int32(minConns))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout+5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot connect to the database: %w", err)
	}
	return pool, nil
}

// connectMigrated is connect for the commands that need the schema of this
// build: it refuses a database with migrations pending.
func (a *app) connectMigrated(ctx context.Context, minConns int) (*pgxpool.Pool, error) {
	pool, err := a.connect(ctx, minConns)
	if err != nil {
		return nil, err
	}
	pending, err := migrations.Pending(ctx, pool)
	switch {
	case err != nil:
		pool.Close()
		return nil, fmt.Errorf("cannot check migrations: %w", err)
	case pending:
		pool.Close()
		return nil, migrations.ErrPending
	}
	return pool, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
