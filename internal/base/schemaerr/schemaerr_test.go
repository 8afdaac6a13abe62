package schemaerr_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/internal/base/schemaerr"
	"github.com/sendonce/sendonce/migrations"
)

// TestWrap: a missing table, column, function or type becomes an error
// matching migrations.ErrPending that keeps the database's own message;
// any other error passes unchanged.
func TestWrap(t *testing.T) {
	for code, want := range map[string]bool{"42P01": true, "42703": true, "42883": true, "42704": true,
		"23505": false, "40001": false, "57014": false} {
		pgErr := &pgconn.PgError{Code: code, Message: "something about " + code}
		in := fmt.Errorf("outbox: insert intents: %w", pgErr)
		got := schemaerr.Wrap("outbox: enqueue", in)
		if pending := errors.Is(got, migrations.ErrPending); pending != want {
			t.Errorf("%s: errors.Is(ErrPending) = %v, want %v (%v)", code, pending, want, got)
		}
		var back *pgconn.PgError
		if !errors.As(got, &back) || back.Code != code {
			t.Errorf("%s: the *pgconn.PgError is lost: %v", code, got)
		}
		if want && (!strings.HasPrefix(got.Error(), "outbox: enqueue: the database needs migrating") ||
			!strings.Contains(got.Error(), "something about "+code)) {
			t.Errorf("%s: %q", code, got)
		}
		if !want && got != in {
			t.Errorf("%s: changed to %v", code, got)
		}
	}
	if schemaerr.Wrap("x", nil) != nil || schemaerr.Wrap("x", errors.New("plain")).Error() != "plain" {
		t.Error("nil or a non-database error should pass unchanged")
	}
}
