package main

import (
	"github.com/spf13/cobra"

	"github.com/sendonce/sendonce/internal/demo"
)

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on a throwaway database against the fake API",
		Long: `demo shows sendonce end to end: it enqueues intents, runs a worker against an
in-process fake OpenEmail API that fails some requests on purpose, and shows
every email delivered exactly once. With no --database-url (or DATABASE_URL)
it starts a throwaway PostgreSQL server from the machine's server binaries.`,
		Example: `  sendonce demo
  sendonce demo --database-url postgres://postgres@localhost/demo`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), demo.Options{
				DatabaseURL: a.databaseURL,
				Out:         a.stdout,
				Logger:      a.logger,
			})
		}),
	}
}
