package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/cmd/internal/ops/demo"
)

func (a *app) demoCommand() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on a throwaway database against the fake API",
		Long: `demo shows sendonce end to end: it enqueues intents, runs a worker against an
in-process fake OpenEmail API that fails some requests on purpose, and shows
every email delivered exactly once. With no --database-url (or DATABASE_URL)
it starts a throwaway PostgreSQL server from the machine's server binaries,
and removes it at the end; --keep keeps it up after the report, its URL
printed, until Ctrl-C.`,
		Example: `  sendonce demo
  sendonce demo --keep
  sendonce demo --database-url postgres://postgres@localhost/demo`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), demo.Options{
				DatabaseURL: a.databaseURL,
				Out:         a.stdout,
				Logger:      a.logger,
				Keep:        keep,
				Command:     selfCommand(),
			})
		}),
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the throwaway PostgreSQL up after the report, until Ctrl-C")
	return cmd
}

// selfCommand is how the reader runs this binary, for the commands the demo
// suggests: "go run ./cmd/sendonce" under go run (make demo), whose binary
// is gone when it exits; "sendonce" when that is this binary on PATH; else
// the binary's path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "sendonce"
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/sendonce"
	}
	if p, err := exec.LookPath("sendonce"); err == nil {
		if a, err1 := filepath.EvalSymlinks(p); err1 == nil {
			if b, err2 := filepath.EvalSymlinks(exe); err2 == nil && a == b {
				return "sendonce"
			}
		}
	}
	return exe
}
