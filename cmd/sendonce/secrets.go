package main

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Where a UI token may come from. Not from the command line: a process's
// arguments are in every local user's ps (and /proc/PID/cmdline) for as
// long as it runs, its environment only in its own user's and root's.
const (
	envUIToken     = "SENDONCE_UI_TOKEN"
	envUITokenFile = "SENDONCE_UI_TOKEN_FILE"
)

// maxUITokenFile bounds what --ui-token-file reads, so that a wrong path
// (/dev/zero, a log) fails at once instead of filling the memory.
const maxUITokenFile = 64 << 10

// errUITokenFlag refuses --ui-token on the command line. The flag stays
// declared (hidden, and what SENDONCE_UI_TOKEN sets) so that an old
// command line gets this message, not "unknown flag".
var errUITokenFlag = usagef("--ui-token on the command line shows the token to every user of this machine (ps, /proc/PID/cmdline): " +
	"put it in " + envUIToken + ", or in a file named by --ui-token-file (or " + envUITokenFile + ")")

// uiTokenFromFile reads the UI token(s) from path: the whole file, without
// the surrounding white space (a secrets mount's trailing newline). Its
// errors name the path, never what the file holds.
func uiTokenFromFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", usagef("--ui-token-file: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUITokenFile+1))
	switch {
	case err != nil:
		return "", usagef("--ui-token-file: %v", err)
	case len(b) > maxUITokenFile:
		return "", usagef("--ui-token-file %s is over %d KiB: is it the token file?", path, maxUITokenFile>>10)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usagef("--ui-token-file %s is empty: want SECRET or NAME:SECRET, several comma-separated", path)
	}
	return tok, nil
}

// resolveUIToken settles o.uiToken before anything starts: refused from the
// command line, read from --ui-token-file when that is given, and refused
// when both the file and SENDONCE_UI_TOKEN give one (which would win is
// not something an operator should have to guess).
func (o *workOptions) resolveUIToken() error {
	if o.uiTokenInArgs {
		return errUITokenFlag
	}
	if o.uiTokenFile == "" {
		return nil
	}
	if o.uiToken != "" {
		return usagef("a UI token in both %s and --ui-token-file %s: set one, not both", envUIToken, o.uiTokenFile)
	}
	tok, err := uiTokenFromFile(o.uiTokenFile)
	if err != nil {
		return err
	}
	o.uiToken = tok
	return nil
}

// warnDSNPassword warns, once at start, when --database-url is given on
// the command line with a password in it: ps shows it to every user of the
// machine, as it would --ui-token. It is a warning, not a refusal, because a
// URL with a password on the command line is the convention of psql and
// River's own CLI, and scripts rely on it; the warning names the safer
// places and never the password.
func warnDSNPassword(cmd *cobra.Command, dsn string, logger *slog.Logger) {
	f := cmd.Flags().Lookup("database-url")
	if f == nil || !f.Changed || len(dsnSecrets(dsn)) == 0 {
		return
	}
	logger.Warn("--database-url holds a password, which every user of this machine sees in ps: " +
		"give the URL in DATABASE_URL instead, or leave the password out of it and put it in PGPASSWORD or a password file (~/.pgpass, PGPASSFILE)")
}
