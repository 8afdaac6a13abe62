package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
)

// Behind a pooler (issue 24): the pooler variants run a scenario with
// every connection of its producers (Go, plain SQL, the command line) and
// of its workers through a PgBouncer of the test's own in front of the
// scenario's server, in transaction mode and in session mode. Only the
// scenario's own reads and checks go straight to the database. The
// processes are told the mode the way an operator tells them,
// SENDONCE_POOLER, and otherwise run with the scenario's flags.

// poolerTag names a pooler variant in labels and key prefixes.
func (v variant) poolerTag() string {
	switch v.Pooler {
	case pgbouncer.Transaction:
		return "pgbtx"
	case pgbouncer.Session:
		return "pgbsess"
	}
	return ""
}

// route returns the environment of the scenario's sendonce processes and
// the pool of its Go and SQL producers: for a pooler variant, both through
// a PgBouncer in front of dbURL's server (the producers' pool with pgx's
// defaults, as an application opens one); otherwise dbURL itself and
// direct, the scenario's own pool.
func (v variant) route(t testing.TB, dbURL string, direct *pgxpool.Pool, srv *fakeapi.Server) (env, *pgxpool.Pool) {
	t.Helper()
	if v.Pooler == "" {
		return processEnv(dbURL, srv), direct
	}
	url := pgbouncer.ForTest(t, dbURL, v.Pooler)
	e := processEnv(url, srv)
	e.Extra = append(e.Extra, "SENDONCE_POOLER="+string(v.Pooler))
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	producers, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect through PgBouncer: %v", err)
	}
	t.Cleanup(producers.Close)
	t.Cleanup(func() { checkNoPreparedStatementErrors(t) })
	return e, producers
}

// checkNoPreparedStatementErrors fails the test when a sendonce process
// of it printed an error of a prepared statement the pooler lost (26000)
// or gave another client's (42P05): a statement that assumed a session of
// its own. Errors of a database restart are expected; these never are.
func checkNoPreparedStatementErrors(t testing.TB) {
	t.Helper()
	for _, c := range allCaptures() {
		if !strings.HasPrefix(c.name, t.Name()+"/") {
			continue
		}
		text := c.String()
		if n := strings.Count(text, "(SQLSTATE 42P05)") + strings.Count(text, "(SQLSTATE 26000)"); n > 0 {
			t.Errorf("%s: %d prepared-statement errors through the pooler, e.g. %s", c.name, n, firstLineWith(text, "SQLSTATE"))
		}
	}
}

func firstLineWith(text, s string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			return tail(strings.TrimSpace(line), 300)
		}
	}
	return ""
}
