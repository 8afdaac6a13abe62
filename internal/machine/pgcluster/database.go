package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Database is a database of its own on a PostgreSQL server (a test's, the
// template tests are cloned from, the benchmark's), made by CreateDatabase
// and removed by Drop. The server's other databases are never touched.
type Database struct {
	// Name is the prefix given to CreateDatabase and a random suffix.
	Name string
	// URL connects to the database, as the server URL it was created
	// from connects to the server.
	URL string

	server string
}

// CreateDatabase creates a database named prefix and sixteen random hex
// digits on the server at serverURL (URL or keyword/value form; the role
// needs CREATEDB). With a template it is a copy of that database, which is
// how every test gets a migrated database in a few milliseconds; without,
// it is empty.
func CreateDatabase(ctx context.Context, serverURL, prefix, template string) (*Database, error) {
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	name := prefix + hex.EncodeToString(suffix[:])
	dbURL, err := DatabaseURL(serverURL, name)
	if err != nil {
		return nil, err
	}
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if err := execOn(ctx, serverURL, sql); err != nil {
		return nil, fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return &Database{Name: name, URL: dbURL, server: serverURL}, nil
}

// Drop drops the database WITH (FORCE), so that a process still connected
// (a worker a failed test left running, say) does not leave it behind.
func (d *Database) Drop(ctx context.Context) error {
	if err := execOn(ctx, d.server, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgcluster: drop database %s: %w", d.Name, err)
	}
	return nil
}

// DatabaseURL returns serverURL connecting to the database name instead of
// the one it names. Both URL and keyword/value forms are understood.
func DatabaseURL(serverURL, name string) (string, error) {
	if !strings.HasPrefix(serverURL, "postgres://") && !strings.HasPrefix(serverURL, "postgresql://") {
		return serverURL + " dbname=" + name, nil
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		// The parse error quotes the URL, password included.
		return "", fmt.Errorf("pgcluster: the server URL is not a valid URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}

// execOn runs one statement on a connection of its own: CREATE and DROP
// DATABASE cannot run inside a transaction, nor on a connection to the
// database they drop.
func execOn(ctx context.Context, serverURL, sql string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}
