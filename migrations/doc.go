// Package migrations holds sendonce's versioned SQL and applies it, together
// with River's own migrations, to the application's database.
//
// The SQL files in sql/ are embedded in the binary and applied with goose
// (github.com/pressly/goose), which records each applied version in the
// table sendonce_schema_migrations; River's tables are migrated by River's
// own rivermigrate package. Up takes a PostgreSQL advisory lock first, so
// several processes starting at once migrate one at a time, and running it
// again is a no-op:
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if _, err := migrations.Up(ctx, pool); err != nil {
//		log.Fatal(err)
//	}
package migrations
