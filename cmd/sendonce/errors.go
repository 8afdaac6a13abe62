package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1 // the command was well formed but failed
	exitUsage   = 2 // the command line itself was wrong; nothing was tried
)

// usageError marks an error in the command line: a missing or malformed
// flag or argument, found before anything touched the outside world.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// runtimeError marks an error returned by a command's RunE, as opposed to
// cobra's own complaints about the command line.
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// exitCode maps an error from Execute to the process's exit status.
// Errors cobra raises itself (unknown command or flag, bad arguments) are
// usage errors.
func exitCode(err error) int {
	var ue usageError
	var re runtimeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &re):
		return exitRuntime
	}
	return exitUsage
}

// errorLine renders err as the one line printed on stderr after
// "sendonce: ". It drops the package prefixes the layers below add, says
// the known failures in words, folds the message onto one line, and removes
// every secret given (the database password).
func errorLine(err error, secrets ...string) string {
	msg := describe(err)
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	msg = redactDSN(msg)
	msg = strings.Join(strings.Fields(msg), " ")
	for {
		trimmed := strings.TrimPrefix(strings.TrimPrefix(msg, "sendonce: "), "outbox: ")
		if trimmed == msg {
			break
		}
		msg = trimmed
	}
	return msg
}

func describe(err error) string {
	var pgErr *pgconn.PgError
	var inv *outbox.InvalidError
	var reuse *outbox.KeyReuseError
	var state *outbox.StateError
	switch {
	case errors.As(err, &inv):
		return inv.Error()
	case errors.As(err, &reuse):
		return reuse.Error()
	case errors.As(err, &state):
		return state.Error()
	case errors.Is(err, outbox.ErrNotFound):
		// "outbox: get: sendonce: no intent with that key: "k"" reads
		// better as:
		msg := err.Error()
		if i := strings.LastIndex(msg, outbox.ErrNotFound.Error()); i >= 0 {
			return "no intent with key" + strings.TrimPrefix(msg[i:], outbox.ErrNotFound.Error()+":")
		}
		return msg
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return migrations.ErrPending.Error() + " (" + pgErr.Message + ")"
	}
	return err.Error()
}

// dsnPassword matches the password of a URL's user information and of a
// keyword/value connection string.
var (
	urlPassword     = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)
	keywordPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
)

// redactDSN replaces passwords in anything that looks like a connection
// string. pgx keeps them out of its errors already; this is the second
// lock on the door.
func redactDSN(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}xxxxx@")
	return keywordPassword.ReplaceAllString(s, "${1}xxxxx")
}

// dsnSecrets returns the password a connection string carries, in every
// form it might be echoed in, for errorLine to remove.
func dsnSecrets(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	if u, err := url.Parse(dsn); err == nil {
		if pw := u.Query().Get("password"); pw != "" {
			out = append(out, pw, url.QueryEscape(pw))
		}
	}
	if m := keywordPassword.FindStringSubmatch(dsn); m != nil {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}
