package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/migrations"
)

// setupDatabase is step 1: a throwaway cluster or the given database,
// connected and migrated.
func (d *demo) setupDatabase(ctx context.Context) error {
	d.section(1, "A database")
	url := d.opts.DatabaseURL
	if url == "" {
		// Installs PostgreSQL's server package first when it is missing
		// (saying what it runs), or says the one command to run.
		bin, err := pgcluster.EnsureBinDir(ctx, d.out)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		d.say("Starting a throwaway PostgreSQL from %s (set DATABASE_URL to use yours).", bin)
		started := time.Now()
		// Start is not interrupted midway: a pg_ctl killed while the server
		// comes up could leave a server behind. It takes a second or two;
		// a cancellation is honoured right after.
		c, err := pgcluster.Start(context.WithoutCancel(ctx), pgcluster.Options{})
		if err != nil {
			return fmt.Errorf("demo: start a throwaway PostgreSQL: %w", err)
		}
		d.onCleanup("removed the throwaway PostgreSQL", c.Stop)
		if err := ctx.Err(); err != nil {
			return err
		}
		d.throwaway = true
		url = c.URL
		d.say("Up on 127.0.0.1:%d in %s; it is removed when the demo ends.", c.Port, round(time.Since(started)))
	} else {
		where, err := describeURL(url)
		if err != nil {
			return err
		}
		d.say("Using your database %s (password not shown).", where)
	}
	d.dbURL = url

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("demo: connect: %w", err)
	}
	d.pool = pool
	d.onCleanup("", func() error { pool.Close(); return nil })
	var version string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return fmt.Errorf("demo: connect: %w", err)
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0] // "15.18 (Debian 15.18-0+deb12u1)"
	}
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		return fmt.Errorf("demo: migrate: %w", err)
	}
	if res.Applied() {
		d.say("PostgreSQL %s, migrated: River's job tables, and sendonce_outbox where intents live.", version)
	} else {
		d.say("PostgreSQL %s, already migrated: River's job tables, and sendonce_outbox.", version)
	}
	if !d.throwaway {
		return d.checkSharedDatabase(ctx)
	}
	return nil
}

// checkSharedDatabase guards a database of the user's own. The demo's
// workers send to the fake API, and their drains claim the pending intents
// of the demo's queue that have no River job of their own: such an intent
// waiting now would be "sent" to the fake and never reach anyone. The
// application's intents, on its own queue, are left alone.
func (d *demo) checkSharedDatabase(ctx context.Context) error {
	waiting, err := store.DemoCountWaiting(ctx, d.pool, Queue)
	if err != nil {
		return fmt.Errorf("demo: read the outbox: %w", err)
	}
	if waiting > 0 {
		return fmt.Errorf("demo: refusing to run: %d intents in this database's outbox wait on the demo's queue %q, "+
			"and the demo's worker would send them to its fake API; "+
			"run the demo on an empty database, or without DATABASE_URL for a throwaway one", waiting, Queue)
	}
	leaders, err := store.DemoCountRiverLeaders(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("demo: read River's leader: %w", err)
	}
	if leaders > 0 {
		d.otherLeader = true
		d.say("Note: another River client leads this database, so River's rescuer runs there, on its own")
		d.say("--rescue-after; the recovery after the kill below waits on it and may take minutes.")
	}
	d.say("The demo's jobs go to River queue %q: its workers leave your application's intents alone.", Queue)
	return nil
}

// describeURL names a database for the user without its password:
// user@host:port/database.
func describeURL(url string) (string, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return "", fmt.Errorf("demo: DATABASE_URL is not a valid PostgreSQL connection string")
	}
	user := cfg.User
	if user != "" {
		user += "@"
	}
	return fmt.Sprintf("%s%s:%d/%s", user, cfg.Host, cfg.Port, cfg.Database), nil
}
