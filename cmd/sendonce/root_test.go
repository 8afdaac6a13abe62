package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sendonce/sendonce/outbox"
)

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	root := (&app{}).rootCommand()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "help" || cmd.Name() == "completion" {
			continue
		}
		r := sendonce(t, nil, "", cmd.Name(), "--help")
		wantOK(t, r)
		if !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("%s --help: %s", cmd.Name(), r)
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(r.stdout, "--"+f.Name) {
				t.Errorf("%s --help does not mention --%s", cmd.Name(), f.Name)
			}
			if env := f.Annotations[envAnnotation]; len(env) > 0 && !strings.Contains(r.stdout, env[0]) {
				t.Errorf("%s --help does not name %s", cmd.Name(), env[0])
			}
		})
	}
	r := sendonce(t, nil, "", "--help")
	wantOK(t, r)
	for _, want := range []string{"migrate", "work", "enqueue", "status", "show", "list", "cancel", "retry", "demo", "OPENEMAIL_API_KEY"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

func TestUnknownCommandIsOneLine(t *testing.T) {
	t.Parallel()
	wantError(t, sendonce(t, nil, "", "stauts"), 2, `unknown command "stauts"`)
	wantError(t, sendonce(t, nil, "", "status", "--bogus"), 2, "bogus")
}

func TestWorkFlagsHaveEnvironmentVariables(t *testing.T) {
	t.Parallel()
	var work *cobra.Command
	for _, c := range (&app{}).rootCommand().Commands() {
		if c.Name() == "work" {
			work = c
		}
	}
	work.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && len(f.Annotations[envAnnotation]) == 0 {
			t.Errorf("--%s has no environment variable", f.Name)
		}
	})
}

func TestErrorLineHidesPasswords(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://app:Hunter2Secret@db.example.com:5432/app",
		"postgres://app@db.example.com/app?password=Hunter2Secret",
		"host=db.example.com user=app password=Hunter2Secret dbname=app",
		"host=db.example.com user=app password='Hunter2Secret' dbname=app",
		"postgres://app:Hunter2Secret@db.example.com:notaport/app",
	} {
		// Whatever pgx says about the URL...
		_, err := pgxpool.ParseConfig(dsn)
		if err == nil {
			err = fmt.Errorf("failed to connect: %s", dsn) // ...or a worst case that echoes it whole.
		}
		if line := errorLine(err, dsnSecrets(dsn)...); strings.Contains(line, "Hunter2Secret") {
			t.Errorf("password shown for %q: %s", dsn, line)
		}
	}
}

func TestErrorLineIsOneCleanLine(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		fmt.Errorf("outbox: get: %w", fmt.Errorf("%w: %q", outbox.ErrNotFound, "k:1")):      `no intent with key "k:1"`,
		&outbox.StateError{Key: "k", Op: "cancel", State: outbox.StateSent, Reason: "sent"}: `cannot cancel intent "k" (state sent): sent`,
		errors.New("first\nsecond\tthird"):                                                  "first second third",
		errors.New("sendonce: sendonce: twice"):                                             "twice",
	} {
		if got := errorLine(err); got != want {
			t.Errorf("errorLine(%q) = %q, want %q", err, got, want)
		}
	}
}
