// Command withpg runs a command with a PostgreSQL server at hand: the one in
// TEST_DATABASE_URL or DATABASE_URL when set, otherwise a throwaway cluster
// started from the machine's server binaries and removed afterwards. The
// command sees the server's URL in TEST_DATABASE_URL.
//
//	go run ./internal/cmd/withpg -- go test -race ./...
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	os.Exit(run(args))
}

func run(args []string) int {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		c, err := pgcluster.Start(context.Background(), pgcluster.Options{
			Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "withpg: "+f+"\n", a...) },
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
			return 1
		}
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
			}
		}()
		url = c.URL
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+url)
	// Ctrl-C reaches the child through the terminal; wait for it to finish
	// so the cluster is removed afterwards.
	signal.Ignore(syscall.SIGINT)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
	return 0
}
